//! The servers only tests, benches and the bench's reproduction recipes
//! use: the fake Tinker-compatible training service (`metaclaw dev
//! tinker`) and the bench's scripted models in the dummy upstream
//! (`metaclaw dev upstream`). Built with the feature `test-servers` (the
//! binary's feature of that name, which its tests and benches turn on);
//! a default install carries neither and says so.

use metaclaw_mock_upstream::Dummy;

/// What a build without the test servers answers when asked for one.
pub const NOT_BUILT: &str = "this metaclaw was built without the test servers (the fake training service and the bench's scripted models): build it with `cargo build --features test-servers` (the tests turn it on themselves)";

/// Whether this build carries the test servers.
pub const BUILT: bool = cfg!(feature = "test-servers");

/// `dummy` with the bench's scripted models (`bench-oracle` …) when this
/// build carries them; as it is otherwise.
pub fn with_bench_models(dummy: Dummy) -> Dummy {
    #[cfg(feature = "test-servers")]
    let dummy = crate::oracle::register(dummy);
    dummy
}

/// Serves the fake training service on `listener` until it fails.
#[cfg(feature = "test-servers")]
pub async fn serve_fake_tinker(listener: tokio::net::TcpListener) -> anyhow::Result<()> {
    metaclaw_mock_tinker::serve(listener).await?;
    Ok(())
}

/// Without the test servers: refuses, saying how to build them.
#[cfg(not(feature = "test-servers"))]
pub async fn serve_fake_tinker(_listener: tokio::net::TcpListener) -> anyhow::Result<()> {
    anyhow::bail!(NOT_BUILT)
}
