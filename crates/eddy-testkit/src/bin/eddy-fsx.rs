//! `eddy-fsx FILE [--seed N] [--ops N] [--max-size BYTES] [--no-mmap] [--no-mmap-write]
//! [--no-direct]`: the random-operation verifier (`eddy_testkit::fsx`) on one file by path,
//! as a program of its own so that it runs under the preload library (or on any mount).
//! Prints the counts of each operation as JSON; exits 1 naming the step that went wrong.

use eddy_testkit::fsx;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut path = None;
    let (mut seed, mut ops, mut max_size) = (1u64, 2000u64, 1u64 << 20);
    let mut caps = fsx::Caps {
        mmap_read: true,
        mmap_write: true,
        direct: true,
    };
    let number = |v: Option<String>, what: &str| -> u64 {
        v.and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            eprintln!("eddy-fsx: {what} wants a number");
            std::process::exit(2)
        })
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seed" => seed = number(args.next(), "--seed"),
            "--ops" => ops = number(args.next(), "--ops"),
            "--max-size" => max_size = number(args.next(), "--max-size"),
            "--no-mmap" => (caps.mmap_read, caps.mmap_write) = (false, false),
            "--no-mmap-write" => caps.mmap_write = false,
            "--no-direct" => caps.direct = false,
            _ if path.is_none() && !a.starts_with("--") => path = Some(a),
            _ => {
                eprintln!("eddy-fsx: unknown argument {a}");
                std::process::exit(2)
            }
        }
    }
    let Some(path) = path else {
        eprintln!("usage: eddy-fsx FILE [--seed N] [--ops N] [--max-size BYTES] [--no-mmap] [--no-mmap-write] [--no-direct]");
        std::process::exit(2)
    };
    let result = fsx::PosixFile::create(std::path::Path::new(&path), caps.direct)
        .and_then(|mut f| fsx::run(&mut f, caps, seed, ops, max_size));
    match result {
        Ok(report) => println!("{}", report.json()),
        Err(e) => {
            eprintln!("eddy-fsx: {path}: {e}");
            std::process::exit(1)
        }
    }
}
