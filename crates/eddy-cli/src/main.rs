fn main() { eprintln!("eddy: work in progress"); std::process::exit(2) }
