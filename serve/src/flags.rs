//! For the binaries' flag tests: a `Config` parsed from a few flags as
//! [`main`](fn@crate::main) parses the command line, and a table of flags
//! that must be refused.

use clap::Parser;

/// `C` from `args` (the flags after the binary's name).
pub fn parse<C: Parser>(args: &[&str]) -> Result<C, clap::Error> {
    let name = C::command().get_name().to_owned();
    C::try_parse_from(std::iter::once(name.as_str()).chain(args.iter().copied()))
}

/// Panics, naming it, at the first of `cases` that `C` accepts.
#[track_caller]
pub fn assert_refused<C: Parser>(cases: &[&[&str]]) {
    for args in cases {
        assert!(parse::<C>(args).is_err(), "accepted: {args:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary with one flag.
    #[derive(Debug, Parser)]
    #[command(name = "demo")]
    struct Demo {
        #[arg(long, default_value_t = 1)]
        count: u32,
    }

    #[test]
    fn flags_parse_after_the_binary_name() {
        assert_eq!(parse::<Demo>(&[]).unwrap().count, 1);
        assert_eq!(parse::<Demo>(&["--count", "3"]).unwrap().count, 3);
        assert!(parse::<Demo>(&["--count", "x"]).is_err());
        let usage = parse::<Demo>(&["--no-such-flag"]).unwrap_err().to_string();
        assert!(usage.contains("Usage: demo"), "{usage}");
    }

    #[test]
    #[should_panic(expected = r#"accepted: ["--count", "2"]"#)]
    fn an_accepted_case_is_named() {
        assert_refused::<Demo>(&[&["--count", "x"], &["--count", "2"]]);
    }
}
