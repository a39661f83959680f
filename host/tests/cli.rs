//! The `host` binary's answers to bad input, as a script sees them (CPU tests): one line on
//! stderr and exit status 1 from the host's own checks, before any GPU is touched (here, with
//! no GPU, a later check would meet the driver's error first); exit status 2 and clap's message
//! where clap refuses the form of a value.
#[path = "common/binary.rs"]
mod binary;

use binary::host_binary;
use std::path::Path;
use std::process::Command;

/// Exit status, stdout and stderr of `host <args>` run in `dir`.
fn host_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(host_binary())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the host binary runs");
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (
        out.status.code().unwrap(),
        text(out.stdout),
        text(out.stderr),
    )
}

/// `host <args>` run in the working directory.
fn host(args: &[&str]) -> (i32, String, String) {
    host_in(Path::new("."), args)
}

/// A directory that does not exist, under the temporary one.
fn missing() -> String {
    let d = std::env::temp_dir().join(format!("host-cli-missing-{}", std::process::id()));
    d.to_str().unwrap().to_string()
}

#[test]
fn our_checks_answer_with_one_line_and_status_1() {
    let missing = missing();
    let temp = std::env::temp_dir();
    let temp = temp.to_str().unwrap();
    let csv = format!("{missing}/t.csv");
    let cases: [(&[&str], String); 10] = [
        (
            &["mnist", "--lr", "-1"],
            "--lr must be positive, not -1".into(),
        ),
        (
            &["iris", "--lr", "inf"],
            "--lr must be a finite number, not inf".into(),
        ),
        (
            &["regression", "--noise", "nan"],
            "--noise must be a finite number, not NaN".into(),
        ),
        (
            &["gemm", "--csv", &csv],
            format!("--csv {csv}: directory {missing} does not exist"),
        ),
        (
            &["regression", "--trace", &csv],
            format!("--trace {csv}: directory {missing} does not exist"),
        ),
        (
            &["regression", "--csv", temp],
            format!("--csv {temp} is a directory: give the file to write"),
        ),
        (
            &["gemm", "--sizes", "square4096,12x"],
            "size \"12x\" is not MxNxK".into(),
        ),
        (
            &["gemm", "--config", "tc99_nope"],
            "unknown GEMM version or config \"tc99_nope\"".into(),
        ),
        (
            &["mnist", "--data", &missing],
            format!("--data {missing}: no such directory"),
        ),
        (
            &["mnist", "--epochs", "0"],
            "--epochs 0 only evaluates, which needs --load".into(),
        ),
    ];
    for (args, says) in cases {
        let (code, stdout, stderr) = host(args);
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(&says),
            "{args:?}: {stderr}"
        );
    }
}

/// Run outside the repository, `host mnist` finds no data of its own and says which flag gives
/// it.
#[test]
fn a_missing_default_data_directory_names_the_flag() {
    let empty = std::env::temp_dir().join(format!("host-cli-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let (code, _, stderr) = host_in(&empty, &["mnist"]);
    std::fs::remove_dir(&empty).unwrap();
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.starts_with("error: no MNIST in data/mnist") && stderr.contains("--data DIR"),
        "{stderr}"
    );
}

#[test]
fn a_ptx_this_build_did_not_embed_is_refused_without_a_gpu() {
    let target = (30..=120)
        .map(host::ptx::Target::portable)
        .find(|t| host::ptx::EMBEDDED.iter().all(|p| p.target() != *t))
        .unwrap()
        .to_string();
    let (code, _, stderr) = host(&["--ptx", &target, "info"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("--ptx {target} is not embedded")),
        "{stderr}"
    );
}

#[test]
fn values_of_the_wrong_form_are_claps_errors_with_status_2() {
    for (args, says) in [
        (
            &["mnist", "--batch", "-1"][..],
            "invalid value '-1' for '--batch <N>'",
        ),
        (&["mnist", "--accum", "f64"], "[possible values: f16, f32]"),
        (&["iris", "--slice-units", "12"], "8, 16 or 32 hidden units"),
        (&["gemm", "--split-k", "1"], "--split-k"),
        (
            &["gemm", "--choice", "--config", "direct"],
            "'--choice' cannot be used with '--config <NAME,…>'",
        ),
    ] {
        let (code, stdout, stderr) = host(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(
            stdout.is_empty() && stderr.contains(says),
            "{args:?}: {stderr}"
        );
    }
}
