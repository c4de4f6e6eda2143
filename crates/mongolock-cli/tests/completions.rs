//! `mongolock completions SHELL` prints a completion script generated from the command's own
//! definitions: every subcommand and option is in it, bash completes with it, and a shell it
//! does not know is a usage error.

mod common;

use common::{SUBCOMMANDS, mongolock_offline as mongolock, text};

/// The script for `shell`, after checking that it was printed with status 0 and nothing on
/// stderr.
fn script(shell: &str) -> String {
    let output = mongolock(&["completions", shell]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(output.stderr.is_empty(), "{}", text(&output.stderr));
    text(&output.stdout)
}

#[test]
fn the_bash_script_names_every_subcommand_and_option() {
    let script = script("bash");
    assert!(script.contains("_mongolock()"), "a bash function: {script}");
    assert!(
        script.contains("complete -F _mongolock"),
        "registered for the command: {script}"
    );
    for subcommand in SUBCOMMANDS {
        assert!(
            script.contains(&format!("mongolock,{subcommand})")),
            "{subcommand} is completed"
        );
    }
    for option in [
        "--resource",
        "--kill-after",
        "--no-wait",
        "--uri",
        "--watch",
    ] {
        assert!(script.contains(option), "{option} is completed");
    }
}

#[test]
fn every_shell_gets_a_script_of_its_own() {
    for (shell, marker) in [
        ("bash", "complete -F _mongolock"),
        ("zsh", "#compdef mongolock"),
        ("fish", "complete -c mongolock"),
        ("elvish", "edit:completion:arg-completer[mongolock]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let script = script(shell);
        assert!(script.contains(marker), "{shell}: {script}");
        for subcommand in ["exec", "elect", "status"] {
            assert!(
                script.contains(subcommand),
                "{shell} completes {subcommand}"
            );
        }
    }
}

/// The bash script, sourced into bash, completes a subcommand and an option from their
/// first letters. Skipped where there is no bash.
#[test]
fn bash_completes_with_the_script() {
    if std::process::Command::new("bash")
        .args(["-c", "true"])
        .status()
        .is_err()
    {
        common::skipped("bash_completes_with_the_script", "bash is not installed");
        return;
    }
    let probe = r#"
source <("$1" completions bash)
COMP_WORDS=(mongolock e); COMP_CWORD=1
_mongolock mongolock e mongolock
echo "subcommands: ${COMPREPLY[*]}"
COMP_WORDS=(mongolock exec --kill); COMP_CWORD=2
_mongolock mongolock --kill exec
echo "options: ${COMPREPLY[*]}"
COMP_WORDS=(mongolock completions f); COMP_CWORD=2
_mongolock mongolock f completions
echo "shells: ${COMPREPLY[*]}"
"#;
    let output = std::process::Command::new("bash")
        .args(["-c", probe, "probe", env!("CARGO_BIN_EXE_mongolock")])
        .env_remove("MONGODB_URI")
        .output()
        .expect("bash runs");
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(stdout.contains("subcommands: exec elect\n"), "{stdout}");
    assert!(stdout.contains("options: --kill-after\n"), "{stdout}");
    assert!(stdout.contains("shells: fish\n"), "{stdout}");
}

#[test]
fn an_unknown_shell_is_a_usage_error() {
    let output = mongolock(&["completions", "tcsh"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        output.stdout.is_empty(),
        "no script: {}",
        text(&output.stdout)
    );
    for words in [
        "invalid value 'tcsh'",
        "<SHELL>",
        "bash, elvish, fish, powershell, zsh",
    ] {
        assert!(stderr.contains(words), "{words:?} in {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}
