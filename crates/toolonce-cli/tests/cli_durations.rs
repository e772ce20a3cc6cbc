//! Durations on the command line, from the absurd to the meaningless: `toolonce exec` either
//! runs the command (a wait of "forever" is a fine thing to ask for) or refuses the flag with
//! its value and the allowed range, before anything is claimed — and never panics (exit 101).

mod cli_support;

use cli_support::{code, exec, lines, stderr, stdout};

#[test]
fn a_wait_of_1e19_seconds_means_forever_and_the_command_runs() {
    let dir = tempfile::tempdir().unwrap();
    for wait in ["1e19", "inf", "1.8446744073709552e19", "0"] {
        let out = exec(
            dir.path(),
            &format!("wait-{wait}"),
            &["--wait", wait],
            "echo ran >> counter; echo done",
        );
        assert_eq!(code(&out), 0, "--wait {wait}: {}", stderr(&out));
        assert_eq!(stdout(&out), "done\n");
    }
    assert_eq!(lines(&dir.path().join("counter")), 4);
}

#[test]
fn absurd_or_meaningless_durations_are_refused_naming_the_flag_the_value_and_the_range() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, value, explains) in [
        ("--lease", "1e19", "between 0.03 and 3153600000 seconds"),
        ("--lease", "0", "between 0.03 and 3153600000 seconds"),
        ("--lease", "0.001", "between 0.03 and 3153600000 seconds"),
        ("--lease", "inf", "between 0.03 and 3153600000 seconds"),
        ("--lease", "-1", "0 or more"),
        ("--lease", "NaN", "not a number"),
        ("--retention", "0", "between 0.001 and 3153600000 seconds"),
        (
            "--retention",
            "1e19",
            "between 0.001 and 3153600000 seconds",
        ),
        (
            "--retention",
            "1e400",
            "between 0.001 and 3153600000 seconds",
        ),
        ("--wait", "-1", "0 or more"),
        ("--wait", "-inf", "0 or more"),
        ("--wait", "nan", "not a number"),
        ("--wait", "soon", "not a number"),
    ] {
        let out = exec(
            dir.path(),
            "refused",
            &[&format!("{flag}={value}")],
            "echo ran >> counter",
        );
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{flag} {value}: {err}");
        assert!(!err.contains("panicked"), "{flag} {value}: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
        assert!(err.contains(value), "{flag} {value}: {err}");
        assert!(err.contains(explains), "{flag} {value}: {err}");
    }
    assert_eq!(lines(&dir.path().join("counter")), 0, "a refused call ran");
}
