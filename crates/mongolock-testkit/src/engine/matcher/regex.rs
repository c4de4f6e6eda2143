//! A small backtracking regular-expression engine for `$regex`, covering the PCRE subset
//! that queries commonly use: literals, `.`, classes (`[a-z]`, `[^...]`, `\d\w\s` and their
//! negations, POSIX `[:alpha:]`), anchors (`^ $ \A \z \Z \b \B`), groups (`(...)`,
//! `(?:...)`), alternation and greedy/lazy quantifiers (`* + ? {n} {n,} {n,m}`), with the
//! options `i`, `m`, `s`, `x` and `u`.
//!
//! Constructs outside that subset (back-references, look-around, possessive quantifiers,
//! inline flags, ...) are rejected when the filter is parsed, never silently misread. The
//! crate has no regex dependency, and this keeps the emulator's dependency set unchanged.

// `CommandError` is large (reply extras, labels); boxing it is the lead's call (error.rs).

use std::cell::Cell;

use super::super::{CommandError, Result};

/// mongod's code for an invalid regular expression.
const INVALID_REGEX: i32 = 51091;
/// mongod's code for an unknown regex option flag.
const INVALID_FLAG: i32 = 51108;
/// Backtracking budget per match attempt; beyond it the match fails with an error.
const STEP_LIMIT: u64 = 1_000_000;
/// Recursion budget: nested repetitions of groups (`(?:ab)+`) recurse once per repetition
/// (single-character repetitions such as `.*` do not); about 4.5 KiB of stack each in debug
/// builds, so 200 stays well inside a 2 MiB thread stack.
const DEPTH_LIMIT: u32 = 200;

/// A compiled regular expression with its MongoDB options.
#[derive(Debug, Clone)]
pub struct Regex {
    pattern: String,
    options: String,
    alts: Vec<Vec<Node>>,
    icase: bool,
    multiline: bool,
    dotall: bool,
}

#[derive(Debug, Clone)]
enum Node {
    Char(char),
    Any,
    Class(Class),
    /// A group of single-character alternatives (`(a|[0-9]|.)`), matched as one character.
    OneOf(Vec<Node>),
    LineStart,
    LineEnd,
    StrStart,
    StrEnd,
    StrEndNewline,
    WordBoundary(bool),
    Group(Vec<Vec<Node>>),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
        greedy: bool,
    },
}

#[derive(Debug, Clone)]
struct Class {
    negated: bool,
    items: Vec<ClassItem>,
}

#[derive(Debug, Clone)]
enum ClassItem {
    Range(char, char),
    Digit(bool),
    Word(bool),
    Space(bool),
}

/// Whether a node always consumes exactly one character.
fn is_single(node: &Node) -> bool {
    matches!(
        node,
        Node::Char(_) | Node::Any | Node::Class(_) | Node::OneOf(_)
    )
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
}

impl ClassItem {
    fn matches(&self, c: char) -> bool {
        match self {
            ClassItem::Range(lo, hi) => *lo <= c && c <= *hi,
            ClassItem::Digit(neg) => c.is_ascii_digit() != *neg,
            ClassItem::Word(neg) => is_word(c) != *neg,
            ClassItem::Space(neg) => is_space(c) != *neg,
        }
    }
}

impl Class {
    fn matches(&self, c: char, icase: bool) -> bool {
        let hit = |ch: char| self.items.iter().any(|i| i.matches(ch));
        let found = if icase {
            hit(c) || c.to_lowercase().any(hit) || c.to_uppercase().any(hit)
        } else {
            hit(c)
        };
        found != self.negated
    }
}

/// mongod's shape for a pattern that does not compile: `Regular expression is invalid: <why>`.
fn invalid(_pattern: &str, why: &str) -> CommandError {
    CommandError::new(
        INVALID_REGEX,
        format!("Regular expression is invalid: {why}"),
    )
}

struct Parser<'a> {
    chars: Vec<char>,
    pos: usize,
    extended: bool,
    pattern: &'a str,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn skip_extended(&mut self) {
        if !self.extended {
            return;
        }
        while let Some(c) = self.peek() {
            if c.is_whitespace() {
                self.pos += 1;
            } else if c == '#' {
                while let Some(c) = self.peek() {
                    self.pos += 1;
                    if c == '\n' {
                        break;
                    }
                }
            } else {
                break;
            }
        }
    }

    fn err(&self, why: &str) -> CommandError {
        invalid(self.pattern, why)
    }

    fn parse_alts(&mut self, depth: u32) -> Result<Vec<Vec<Node>>> {
        if depth > 200 {
            return Err(self.err("nesting too deep"));
        }
        let mut alts = vec![Vec::new()];
        loop {
            self.skip_extended();
            let Some(c) = self.peek() else { break };
            match c {
                '|' => {
                    self.pos += 1;
                    alts.push(Vec::new());
                }
                ')' => break,
                _ => {
                    let atom = self.parse_atom(depth)?;
                    let atom = self.parse_quantifier(atom)?;
                    if let Some(seq) = alts.last_mut() {
                        seq.push(atom);
                    }
                }
            }
        }
        Ok(alts)
    }

    fn parse_atom(&mut self, depth: u32) -> Result<Node> {
        let Some(c) = self.peek() else {
            return Err(self.err("unexpected end of pattern"));
        };
        self.pos += 1;
        Ok(match c {
            '.' => Node::Any,
            '^' => Node::LineStart,
            '$' => Node::LineEnd,
            '[' => Node::Class(self.parse_class()?),
            '(' => {
                if self.peek() == Some('?') {
                    self.skip_group_prefix()?;
                }
                let alts = self.parse_alts(depth + 1)?;
                if self.peek() != Some(')') {
                    return Err(self.err("missing )"));
                }
                self.pos += 1;
                Node::Group(alts)
            }
            ')' => return Err(self.err("unmatched )")),
            '*' | '+' | '?' => return Err(self.err("quantifier does not follow a repeatable item")),
            '\\' => self.parse_escape()?,
            other => Node::Char(other),
        })
    }

    /// After `(?`: accepts non-capturing `(?:` and named groups (`(?<n>`, `(?P<n>`, `(?'n'`,
    /// which match like plain groups since nothing is captured); rejects the rest.
    fn skip_group_prefix(&mut self) -> Result<()> {
        let next = self.chars.get(self.pos + 1).copied();
        let after = self.chars.get(self.pos + 2).copied();
        let close = match (next, after) {
            (Some(':'), _) => {
                self.pos += 2;
                return Ok(());
            }
            (Some('<'), Some(c)) if c != '=' && c != '!' => '>',
            (Some('P'), Some('<')) => '>',
            (Some('\''), _) => '\'',
            _ => {
                return Err(self.err(
                    "group constructs (?...) other than (?:...) and named groups are not \
                     supported by the emulator",
                ));
            }
        };
        let start = self.pos + if next == Some('P') { 3 } else { 2 };
        let Some(len) = self.chars[start..].iter().position(|c| *c == close) else {
            return Err(self.err("syntax error in subpattern name (missing terminator)"));
        };
        let name = &self.chars[start..start + len];
        if name.is_empty() || !name.iter().all(|c| is_word(*c)) || name[0].is_ascii_digit() {
            return Err(self.err("invalid subpattern name"));
        }
        self.pos = start + len + 1;
        Ok(())
    }

    fn parse_escape(&mut self) -> Result<Node> {
        let Some(c) = self.peek() else {
            return Err(self.err("\\ at end of pattern"));
        };
        self.pos += 1;
        let class = |item| {
            Node::Class(Class {
                negated: false,
                items: vec![item],
            })
        };
        Ok(match c {
            'd' => class(ClassItem::Digit(false)),
            'D' => class(ClassItem::Digit(true)),
            'w' => class(ClassItem::Word(false)),
            'W' => class(ClassItem::Word(true)),
            's' => class(ClassItem::Space(false)),
            'S' => class(ClassItem::Space(true)),
            'b' => Node::WordBoundary(true),
            'B' => Node::WordBoundary(false),
            'A' => Node::StrStart,
            'z' => Node::StrEnd,
            'Z' => Node::StrEndNewline,
            _ => Node::Char(self.escaped_char(c)?),
        })
    }

    /// The character an escape stands for (`\n`, `\x41`, `\.`, ...).
    fn escaped_char(&mut self, c: char) -> Result<char> {
        Ok(match c {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'f' => '\x0c',
            'v' => '\x0b',
            'e' => '\x1b',
            'a' => '\x07',
            '0' => '\0',
            'x' => {
                let mut digits = String::new();
                if self.peek() == Some('{') {
                    self.pos += 1;
                    while let Some(d) = self.peek() {
                        self.pos += 1;
                        if d == '}' {
                            break;
                        }
                        digits.push(d);
                    }
                } else {
                    for _ in 0..2 {
                        match self.peek() {
                            Some(d) if d.is_ascii_hexdigit() => {
                                digits.push(d);
                                self.pos += 1;
                            }
                            _ => break,
                        }
                    }
                }
                u32::from_str_radix(if digits.is_empty() { "0" } else { &digits }, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| self.err("invalid \\x escape"))?
            }
            '1'..='9' => return Err(self.err("back-references are not supported by the emulator")),
            c if c.is_ascii_alphanumeric() => {
                return Err(self.err(&format!("escape \\{c} is not supported by the emulator")));
            }
            other => other,
        })
    }

    fn parse_class(&mut self) -> Result<Class> {
        let mut class = Class {
            negated: false,
            items: Vec::new(),
        };
        if self.peek() == Some('^') {
            class.negated = true;
            self.pos += 1;
        }
        let mut first = true;
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err("missing terminating ] for character class"));
            };
            self.pos += 1;
            if c == ']' && !first {
                break;
            }
            first = false;
            let lo = match c {
                '[' if self.peek() == Some(':') => {
                    let rest: String = self.chars[self.pos..].iter().collect();
                    let Some(end) = rest.find(":]") else {
                        return Err(self.err("unterminated POSIX class"));
                    };
                    let name = &rest[1..end];
                    self.pos += end + 2;
                    let ranges: &[(char, char)] = match name {
                        "alpha" => &[('a', 'z'), ('A', 'Z')],
                        "digit" => &[('0', '9')],
                        "alnum" => &[('a', 'z'), ('A', 'Z'), ('0', '9')],
                        "upper" => &[('A', 'Z')],
                        "lower" => &[('a', 'z')],
                        "space" => &[(' ', ' '), ('\t', '\r')],
                        "xdigit" => &[('0', '9'), ('a', 'f'), ('A', 'F')],
                        "punct" => &[('!', '/'), (':', '@'), ('[', '`'), ('{', '~')],
                        "word" => &[('a', 'z'), ('A', 'Z'), ('0', '9'), ('_', '_')],
                        _ => return Err(self.err("unknown POSIX class name")),
                    };
                    class
                        .items
                        .extend(ranges.iter().map(|(a, b)| ClassItem::Range(*a, *b)));
                    continue;
                }
                '\\' => {
                    let Some(e) = self.peek() else {
                        return Err(self.err("\\ at end of pattern"));
                    };
                    self.pos += 1;
                    let item = match e {
                        'd' => Some(ClassItem::Digit(false)),
                        'D' => Some(ClassItem::Digit(true)),
                        'w' => Some(ClassItem::Word(false)),
                        'W' => Some(ClassItem::Word(true)),
                        's' => Some(ClassItem::Space(false)),
                        'S' => Some(ClassItem::Space(true)),
                        _ => None,
                    };
                    if let Some(item) = item {
                        class.items.push(item);
                        continue;
                    }
                    if e == 'b' {
                        '\x08'
                    } else {
                        self.escaped_char(e)?
                    }
                }
                other => other,
            };
            // A range `lo-hi`, unless the `-` is last.
            if self.peek() == Some('-') && self.chars.get(self.pos + 1).is_some_and(|c| *c != ']') {
                self.pos += 1;
                let Some(h) = self.peek() else {
                    return Err(self.err("missing terminating ] for character class"));
                };
                self.pos += 1;
                let hi = if h == '\\' {
                    let Some(e) = self.peek() else {
                        return Err(self.err("\\ at end of pattern"));
                    };
                    self.pos += 1;
                    self.escaped_char(e)?
                } else {
                    h
                };
                if hi < lo {
                    return Err(self.err("range out of order in character class"));
                }
                class.items.push(ClassItem::Range(lo, hi));
            } else {
                class.items.push(ClassItem::Range(lo, lo));
            }
        }
        Ok(class)
    }

    fn parse_number(&mut self) -> Option<u32> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return None;
        }
        self.chars[start..self.pos]
            .iter()
            .collect::<String>()
            .parse()
            .ok()
    }

    fn parse_quantifier(&mut self, atom: Node) -> Result<Node> {
        self.skip_extended();
        let save = self.pos;
        let (min, max) = match self.peek() {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            Some('{') => {
                self.pos += 1;
                let Some(min) = self.parse_number() else {
                    // Not a quantifier: `{` is a literal, as in PCRE.
                    self.pos = save;
                    return Ok(atom);
                };
                let max = if self.peek() == Some(',') {
                    self.pos += 1;
                    self.parse_number()
                } else {
                    Some(min)
                };
                if self.peek() != Some('}') {
                    self.pos = save;
                    return Ok(atom);
                }
                if max.is_some_and(|m| m < min) {
                    return Err(self.err("numbers out of order in {} quantifier"));
                }
                (min, max)
            }
            _ => return Ok(atom),
        };
        self.pos += 1;
        if matches!(
            atom,
            Node::LineStart
                | Node::LineEnd
                | Node::StrStart
                | Node::StrEnd
                | Node::StrEndNewline
                | Node::WordBoundary(_)
        ) {
            return Ok(atom);
        }
        let mut greedy = true;
        match self.peek() {
            Some('?') => {
                greedy = false;
                self.pos += 1;
            }
            Some('+') => {
                return Err(self.err("possessive quantifiers are not supported by the emulator"));
            }
            _ => {}
        }
        // `(a|b|[0-9])*` repeats one character at a time: match it without recursion.
        let atom = match atom {
            Node::Group(alts) if alts.iter().all(|a| a.len() == 1 && is_single(&a[0])) => {
                Node::OneOf(alts.into_iter().flatten().collect())
            }
            other => other,
        };
        let node = Node::Repeat {
            node: Box::new(atom),
            min,
            max,
            greedy,
        };
        // A quantifier directly after another one is an error in PCRE (`a**`).
        self.skip_extended();
        if matches!(self.peek(), Some('*' | '+' | '?')) {
            return Err(self.err("quantifier does not follow a repeatable item"));
        }
        Ok(node)
    }
}

struct Run<'a> {
    re: &'a Regex,
    text: &'a [char],
    steps: Cell<u64>,
    depth: Cell<u32>,
    aborted: Cell<bool>,
}

type Cont<'k> = &'k mut dyn FnMut(usize) -> bool;

impl Run<'_> {
    fn tick(&self) -> bool {
        let s = self.steps.get() + 1;
        self.steps.set(s);
        if s > STEP_LIMIT || self.depth.get() > DEPTH_LIMIT {
            self.aborted.set(true);
        }
        !self.aborted.get()
    }

    fn char_eq(&self, pat: char, c: char) -> bool {
        pat == c || (self.re.icase && pat.to_lowercase().eq(c.to_lowercase()))
    }

    fn at_word(&self, pos: usize) -> bool {
        self.text.get(pos).is_some_and(|c| is_word(*c))
    }

    /// Whether a zero- or one-character node matches at `pos`: `Some(next position)`.
    fn step(&self, node: &Node, pos: usize) -> Option<usize> {
        let text = self.text;
        let ok = match node {
            Node::Char(_) | Node::Any | Node::Class(_) | Node::OneOf(_) => {
                return self.single(node, pos).then_some(pos + 1);
            }
            Node::LineStart => pos == 0 || (self.re.multiline && text.get(pos - 1) == Some(&'\n')),
            Node::LineEnd => {
                pos == text.len()
                    || (text.get(pos) == Some(&'\n')
                        && (self.re.multiline || pos + 1 == text.len()))
            }
            Node::StrStart => pos == 0,
            Node::StrEnd => pos == text.len(),
            Node::StrEndNewline => {
                pos == text.len() || (pos + 1 == text.len() && text.get(pos) == Some(&'\n'))
            }
            Node::WordBoundary(want) => {
                ((pos > 0 && self.at_word(pos - 1)) != self.at_word(pos)) == *want
            }
            Node::Group(_) | Node::Repeat { .. } => return None,
        };
        ok.then_some(pos)
    }

    /// Matches `nodes` at `pos`, then the continuation. Simple nodes are consumed in a loop;
    /// only groups and repetitions recurse.
    fn seq(&self, nodes: &[Node], pos: usize, k: Cont<'_>) -> bool {
        let mut nodes = nodes;
        let mut pos = pos;
        loop {
            if !self.tick() {
                return false;
            }
            let Some((node, rest)) = nodes.split_first() else {
                return k(pos);
            };
            match node {
                Node::Group(alts) => {
                    for alt in alts {
                        if self.seq(alt, pos, &mut |p| self.seq(rest, p, k)) {
                            return true;
                        }
                        if self.aborted.get() {
                            return false;
                        }
                    }
                    return false;
                }
                Node::Repeat {
                    node,
                    min,
                    max,
                    greedy,
                } => {
                    return if is_single(node) {
                        self.repeat_single(node, *min, *max, *greedy, pos, rest, k)
                    } else {
                        self.repeat(node, *min, *max, *greedy, 0, pos, rest, k)
                    };
                }
                simple => match self.step(simple, pos) {
                    Some(next) => {
                        pos = next;
                        nodes = rest;
                    }
                    None => return false,
                },
            }
        }
    }

    /// Whether a single-character node matches at `pos`.
    fn single(&self, node: &Node, pos: usize) -> bool {
        let Some(c) = self.text.get(pos) else {
            return false;
        };
        match node {
            Node::Char(p) => self.char_eq(*p, *c),
            Node::Any => self.re.dotall || *c != '\n',
            Node::Class(class) => class.matches(*c, self.re.icase),
            Node::OneOf(options) => options.iter().any(|o| self.single(o, pos)),
            _ => false,
        }
    }

    /// A repetition of a single-character node, matched iteratively (no recursion per
    /// repetition, so `.*` over long strings does not grow the stack).
    #[allow(clippy::too_many_arguments)]
    fn repeat_single(
        &self,
        node: &Node,
        min: u32,
        max: Option<u32>,
        greedy: bool,
        pos: usize,
        rest: &[Node],
        k: Cont<'_>,
    ) -> bool {
        let limit = max.map_or(usize::MAX, |m| m as usize);
        let mut count = 0;
        while count < limit && self.single(node, pos + count) {
            count += 1;
        }
        let min = min as usize;
        if count < min {
            return false;
        }
        let mut attempt = |n: usize| self.tick() && self.seq(rest, pos + n, k);
        if greedy {
            (min..=count).rev().any(&mut attempt)
        } else {
            (min..=count).any(&mut attempt)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn repeat(
        &self,
        node: &Node,
        min: u32,
        max: Option<u32>,
        greedy: bool,
        count: u32,
        pos: usize,
        rest: &[Node],
        k: Cont<'_>,
    ) -> bool {
        if !self.tick() {
            return false;
        }
        self.depth.set(self.depth.get() + 1);
        let one = std::slice::from_ref(node);
        let result = if count < min {
            self.seq(one, pos, &mut |p| {
                self.repeat(node, min, max, greedy, count + 1, p, rest, k)
            })
        } else {
            let can_more = max.is_none_or(|m| count < m);
            let more = |k: Cont<'_>| {
                can_more
                    && self.seq(one, pos, &mut |p| {
                        p != pos && self.repeat(node, min, max, greedy, count + 1, p, rest, k)
                    })
            };
            if greedy {
                more(k) || (!self.aborted.get() && self.seq(rest, pos, k))
            } else {
                self.seq(rest, pos, k) || (!self.aborted.get() && more(k))
            }
        };
        self.depth.set(self.depth.get() - 1);
        result
    }
}

/// At most this many groups and quantified items per pattern (each may add a level of
/// recursion when matching).
const MAX_COMPOUND_NODES: usize = 100;

fn count_compound(alts: &[Vec<Node>]) -> usize {
    fn node(n: &Node) -> usize {
        match n {
            Node::Group(alts) => 1 + count_compound(alts),
            Node::Repeat { node: inner, .. } => 1 + node(inner),
            _ => 0,
        }
    }
    alts.iter().flatten().map(node).sum()
}

impl Regex {
    /// Compiles `pattern` with MongoDB regex `options` (`i`, `m`, `s`, `x`, `u`).
    pub fn new(pattern: &str, options: &str) -> Result<Regex> {
        let (mut icase, mut multiline, mut dotall, mut extended) = (false, false, false, false);
        for flag in options.chars() {
            match flag {
                'i' => icase = true,
                'm' => multiline = true,
                's' => dotall = true,
                'x' => extended = true,
                'u' => {}
                other => {
                    return Err(CommandError::new(
                        INVALID_FLAG,
                        format!("invalid flag in regex options: {other}"),
                    ));
                }
            }
        }
        if pattern.contains('\0') {
            return Err(CommandError::bad_value(
                "Regular expression cannot contain an embedded null byte",
            ));
        }
        // Leading inline options, as in `(?i)abc`.
        let chars: Vec<char> = pattern.chars().collect();
        let mut start = 0;
        if chars.starts_with(&['(', '?']) {
            let flags = chars[2..]
                .iter()
                .take_while(|c| "imsx".contains(**c))
                .count();
            if flags > 0 && chars.get(2 + flags) == Some(&')') {
                for flag in &chars[2..2 + flags] {
                    match flag {
                        'i' => icase = true,
                        'm' => multiline = true,
                        's' => dotall = true,
                        _ => extended = true,
                    }
                }
                start = 3 + flags;
            }
        }
        let mut parser = Parser {
            chars,
            pos: start,
            extended,
            pattern,
        };
        let alts = parser.parse_alts(0)?;
        if parser.pos < parser.chars.len() {
            return Err(invalid(pattern, "unmatched )"));
        }
        if count_compound(&alts) > MAX_COMPOUND_NODES {
            return Err(invalid(
                pattern,
                "too many groups and quantifiers for the emulator",
            ));
        }
        Ok(Regex {
            pattern: pattern.to_string(),
            options: options.to_string(),
            alts,
            icase,
            multiline,
            dotall,
        })
    }

    /// The pattern as given.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The options as given.
    pub fn options(&self) -> &str {
        &self.options
    }

    /// Whether the expression matches anywhere in `text` (unanchored search, like PCRE).
    ///
    /// Fails (code 2) only if the pattern backtracks beyond the emulator's budget.
    pub fn is_match(&self, text: &str) -> Result<bool> {
        let chars: Vec<char> = text.chars().collect();
        let run = Run {
            re: self,
            text: &chars,
            steps: Cell::new(0),
            depth: Cell::new(0),
            aborted: Cell::new(false),
        };
        let group = [Node::Group(self.alts.clone())];
        // A pattern anchored at the start of the subject can only match at position 0.
        let anchored = self.alts.iter().all(|alt| match alt.first() {
            Some(Node::StrStart) => true,
            Some(Node::LineStart) => !self.multiline,
            _ => false,
        });
        let last_start = if anchored { 0 } else { chars.len() };
        for start in 0..=last_start {
            if run.seq(&group, start, &mut |_| true) {
                return Ok(true);
            }
            if run.aborted.get() {
                let shown: String = self.pattern.chars().take(64).collect();
                let more = if shown.len() < self.pattern.len() {
                    "..."
                } else {
                    ""
                };
                return Err(CommandError::bad_value(format!(
                    "regular expression /{shown}{more}/ is too expensive for the emulator's matcher"
                )));
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, options: &str, text: &str) -> bool {
        Regex::new(pattern, options)
            .unwrap()
            .is_match(text)
            .unwrap()
    }

    #[test]
    fn matches_the_common_pcre_subset() {
        let cases: &[(&str, &str, &str, bool)] = &[
            ("abc", "", "xxabcxx", true),
            ("^abc", "", "xxabc", false),
            ("^abc$", "", "abc", true),
            ("^abc$", "", "abc\n", true),
            ("^b", "", "a\nb", false),
            ("^b", "m", "a\nb", true),
            ("a$", "m", "a\nb", true),
            ("a$", "", "a\nb", false),
            ("a.c", "", "a\nc", false),
            ("a.c", "s", "a\nc", true),
            ("ABC", "i", "xabcx", true),
            ("[a-c]+x", "", "zzbcax", true),
            ("[^a-c]x", "", "ax", false),
            ("[^a-c]x", "", "dx", true),
            ("\\d{3}-\\d{2,}", "", "tel 123-45", true),
            ("\\d{3}-\\d{2,}", "", "tel 123-4", false),
            ("^(foo|bar)+$", "", "foobarfoo", true),
            ("^(?:foo|bar)baz$", "", "foobaz", true),
            ("^(?:foo|bar)baz$", "", "quxbaz", false),
            ("a.*?b", "", "axxb", true),
            ("\\bword\\b", "", "a word here", true),
            ("\\bword\\b", "", "swordfish", false),
            ("^a b # comment\n c$", "x", "abc", true),
            ("[[:digit:]]+", "", "ab12", true),
            ("\\.", "", "a.b", true),
            ("\\.", "", "ab", false),
            ("x{", "", "x{", true),
            ("^$", "", "", true),
            ("lock-[0-9a-f]{4}$", "", "lock-beef", true),
            ("[A-Z]", "i", "q", true),
            ("\\Aab\\z", "", "ab\n", false),
            ("\\Aab\\Z", "", "ab\n", true),
            ("(a|ab)(c|bcd)(d*)", "", "abcd", true),
            ("^(a+)+$", "", "aaaa", true),
            ("(?i)^abc$", "", "ABC", true),
            ("(?im)^b", "", "a\nB", true),
            ("^(?<word>\\w+)-(?P<n>\\d)$", "", "ab-1", true),
            ("^(?'q'x)$", "", "x", true),
        ];
        for (pattern, options, text, want) in cases {
            assert_eq!(
                m(pattern, options, text),
                *want,
                "/{pattern}/{options} on {text:?}"
            );
        }
    }

    #[test]
    fn rejects_invalid_and_unsupported_patterns() {
        let cases: &[(&str, &str, i32)] = &[
            ("(abc", "", INVALID_REGEX),
            ("abc)", "", INVALID_REGEX),
            ("[abc", "", INVALID_REGEX),
            ("*a", "", INVALID_REGEX),
            ("a**", "", INVALID_REGEX),
            ("(a)\\1", "", INVALID_REGEX),
            ("(?=a)", "", INVALID_REGEX),
            ("(?<=a)b", "", INVALID_REGEX),
            ("a(?i)b", "", INVALID_REGEX),
            ("(?<1a>x)", "", INVALID_REGEX),
            ("a++", "", INVALID_REGEX),
            ("[z-a]", "", INVALID_REGEX),
            ("a{3,1}", "", INVALID_REGEX),
            ("a", "q", INVALID_FLAG),
        ];
        for (pattern, options, code) in cases {
            let err = Regex::new(pattern, options).unwrap_err();
            assert_eq!(err.code, *code, "/{pattern}/{options}: {err}");
        }
        assert_eq!(
            Regex::new("a", "g").unwrap_err().errmsg,
            "invalid flag in regex options: g"
        );
    }

    #[test]
    fn long_patterns_do_not_exhaust_the_stack() {
        let literal = "x".repeat(50_000);
        let re = Regex::new(&literal, "").unwrap();
        assert!(re.is_match(&format!("a{literal}b")).unwrap());
        assert!(!re.is_match(&"y".repeat(50_000)).unwrap());
        let err = Regex::new(&"a*".repeat(200), "").unwrap_err();
        assert_eq!(err.code, INVALID_REGEX);
    }

    #[test]
    fn long_subjects_do_not_exhaust_the_stack() {
        let re = Regex::new("^a.*z$", "").unwrap();
        assert!(re.is_match(&format!("a{}z", "b".repeat(100_000))).unwrap());
        assert!(!re.is_match(&format!("a{}", "b".repeat(100_000))).unwrap());
        let lazy = Regex::new("^a.*?z", "").unwrap();
        assert!(
            lazy.is_match(&format!("a{}zz", "b".repeat(100_000)))
                .unwrap()
        );
        // Group repetition recurses; within the budget it matches, beyond it it fails cleanly.
        let alternatives = Regex::new("^(?:[a-z]|-|_)+$", "").unwrap();
        assert!(alternatives.is_match(&"a-b_".repeat(10_000)).unwrap());
        assert!(
            !alternatives
                .is_match(&format!("{}!", "a-b_".repeat(10_000)))
                .unwrap()
        );
        let group = Regex::new("^(?:ab)+$", "").unwrap();
        assert!(group.is_match(&"ab".repeat(150)).unwrap());
        assert!(group.is_match(&"ab".repeat(5_000)).is_err());
    }

    #[test]
    fn catastrophic_backtracking_is_an_error_not_a_hang() {
        let re = Regex::new("^(a+)+b$", "").unwrap();
        let text = "a".repeat(40);
        assert!(re.is_match(&text).is_err());
    }
}
