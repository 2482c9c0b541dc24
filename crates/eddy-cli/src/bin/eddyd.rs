fn main() { eprintln!("eddyd: work in progress"); std::process::exit(2) }
