//! `$regex` through PCRE2, the library mongod itself uses (since 6.1), so patterns mean
//! exactly what they mean on a real server: `$` before a final newline, `\Z`, look-around,
//! back-references, inline flags.

use super::super::{CommandError, Result};

/// mongod's code for an invalid regular expression.
const INVALID_REGEX: i32 = 51091;
/// mongod's code for an unknown regex option flag.
const INVALID_FLAG: i32 = 51108;
/// mongod's code when a match exceeds PCRE's resource limits.
const REGEX_MATCH_FAILED: i32 = 51156;

/// A compiled regular expression with its MongoDB options.
#[derive(Debug, Clone)]
pub struct Regex {
    pattern: String,
    options: String,
    compiled: pcre2::bytes::Regex,
}

impl Regex {
    /// Compiles `pattern` with MongoDB regex `options` (`i`, `m`, `s`, `x`, `u`).
    pub fn new(pattern: &str, options: &str) -> Result<Regex> {
        let mut builder = pcre2::bytes::RegexBuilder::new();
        builder.utf(true);
        for flag in options.chars() {
            match flag {
                'i' => builder.caseless(true),
                'm' => builder.multi_line(true),
                's' => builder.dotall(true),
                'x' => builder.extended(true),
                'u' => builder.ucp(true),
                other => {
                    return Err(CommandError::new(
                        INVALID_FLAG,
                        format!("invalid flag in regex options: {other}"),
                    ));
                }
            };
        }
        if pattern.contains('\0') {
            return Err(CommandError::bad_value(
                "Regular expression cannot contain an embedded null byte",
            ));
        }
        let compiled = builder.build(pattern).map_err(|error| {
            CommandError::new(
                INVALID_REGEX,
                format!("Regular expression is invalid: {error}"),
            )
        })?;
        Ok(Regex {
            pattern: pattern.to_string(),
            options: options.to_string(),
            compiled,
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

    /// Whether the expression matches anywhere in `text` (unanchored search).
    ///
    /// Fails only when PCRE2 gives up (its match or depth limit), as mongod does.
    pub fn is_match(&self, text: &str) -> Result<bool> {
        self.compiled.is_match(text.as_bytes()).map_err(|error| {
            CommandError::new(
                REGEX_MATCH_FAILED,
                format!(
                    "Error occurred while executing the regular expression. Result code: {error}"
                ),
            )
        })
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
    fn patterns_mean_what_they_mean_in_pcre() {
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
            ("[^a-c]x", "", "dx", true),
            ("\\d{3}-\\d{2,}", "", "tel 123-4", false),
            ("^(foo|bar)+$", "", "foobarfoo", true),
            ("a.*?b", "", "axxb", true),
            ("\\bword\\b", "", "swordfish", false),
            ("^a b # comment\n c$", "x", "abc", true),
            ("[[:digit:]]+", "", "ab12", true),
            ("x{", "", "x{", true),
            ("\\Aab\\z", "", "ab\n", false),
            ("\\Aab\\Z", "", "ab\n", true),
            ("(?i)^abc$", "", "ABC", true),
            ("a(?i)b", "", "aB", true),
            ("^(?<word>\\w+)-(?P<n>\\d)$", "", "ab-1", true),
            ("(a)\\1", "", "xaax", true),
            ("foo(?=bar)", "", "foobar", true),
            ("(?<!x)b", "", "xb", false),
            ("caf\u{e9}", "i", "CAF\u{c9}", true),
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
    fn invalid_patterns_and_flags_are_errors_with_mongods_codes() {
        for pattern in ["(abc", "abc)", "[abc", "*a", "[z-a]", "a{3,1}"] {
            let err = Regex::new(pattern, "").unwrap_err();
            assert_eq!(err.code, INVALID_REGEX, "/{pattern}/: {err}");
            assert!(
                err.errmsg.starts_with("Regular expression is invalid: "),
                "{err}"
            );
        }
        let err = Regex::new("a", "g").unwrap_err();
        assert_eq!(
            (err.code, err.errmsg.as_str()),
            (INVALID_FLAG, "invalid flag in regex options: g")
        );
        assert_eq!(Regex::new("a\0b", "").unwrap_err().code, 2);
    }

    #[test]
    fn catastrophic_backtracking_ends_with_an_error_or_an_answer_not_a_hang() {
        let re = Regex::new("^(a+)+b$", "").unwrap();
        match re.is_match(&"a".repeat(40)) {
            Ok(matched) => assert!(!matched),
            Err(err) => assert_eq!(err.code, REGEX_MATCH_FAILED),
        }
    }

    #[test]
    fn long_subjects_match_and_oversized_patterns_are_refused() {
        let re = Regex::new("^a.*z$", "").unwrap();
        assert!(re.is_match(&format!("a{}z", "b".repeat(100_000))).unwrap());
        let literal = "x".repeat(5_000);
        let long = Regex::new(&literal, "").unwrap();
        assert!(long.is_match(&format!("a{literal}b")).unwrap());
        // Past PCRE2's compiled-size limit the pattern is invalid, as on mongod.
        let err = Regex::new(&"x".repeat(50_000), "").unwrap_err();
        assert_eq!(err.code, INVALID_REGEX);
    }
}
