//! Impls that the server's and the provider's own types both need, written
//! once.

/// `AsRef<str>` and `Display` for newtypes over a `String` that is valid
/// once parsed (their field `0`): each reads as the text it holds.
#[macro_export]
macro_rules! text_newtype {
    ($($name:ident),+ $(,)?) => {$(
        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    )+};
}

/// Implements [`App`](crate::App) for an application type whose own
/// `build`, `local_addr` and `run_until_stopped` do the work (tests call
/// those without the trait): `serve::app!(Application, Config, StartupError)`;
/// `serve::app!(Application, Config, StartupError, scheme)` when its own
/// `scheme()` says whether it serves TLS.
#[macro_export]
macro_rules! app {
    ($app:ty, $config:ty, $error:ty, scheme) => {
        $crate::app!(@impl $app, $config, $error,
            fn scheme(&self) -> &'static str {
                <$app>::scheme(self)
            }
        );
    };
    ($app:ty, $config:ty, $error:ty) => {
        $crate::app!(@impl $app, $config, $error,);
    };
    (@impl $app:ty, $config:ty, $error:ty, $($scheme:item)?) => {
        impl $crate::App for $app {
            type Config = $config;
            type Error = $error;

            async fn build(config: $config) -> Result<Self, $error> {
                <$app>::build(config).await
            }

            fn local_addr(&self) -> std::net::SocketAddr {
                <$app>::local_addr(self)
            }

            async fn run_until_stopped(self, shutdown: impl std::future::Future<Output = ()>) {
                <$app>::run_until_stopped(self, shutdown).await
            }

            $($scheme)?
        }
    };
}
