//! Impls written once for the engine's own types.

/// `Display` and `Debug` for newtypes over a SHA-256 hash: the first 12
/// hex digits, enough to find a value's log lines and too few to reuse
/// (`Debug` wraps them in the type's name).
macro_rules! short_hash_display {
    ($($name:ident),+ $(,)?) => {$(
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&hex::encode(&self.0[..6]))
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self)
            }
        }
    )+};
}
