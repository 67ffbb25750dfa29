//! hyper-util's legacy `Client` over the engine: one GET, then the race's report.
//!
//! ```text
//! cargo run --release -p fastfallback-http --example hyper_client -- https://example.com/
//! ```

use bytes::Bytes;
use fastfallback_http::{ConnectInfo, HyperConnector};
use fastfallback_net::Connector;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .ok_or("usage: hyper_client URL (for example https://example.com/)")?;
    let connector = HyperConnector::new(Connector::builder().build()?);
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let response = client.get(url.parse()?).await?;
    println!("{} {:?}", response.status(), response.version());
    if let Some(info) = response.extensions().get::<ConnectInfo>() {
        println!("{}", info.report());
    }
    let body = response.into_body().collect().await?.to_bytes();
    println!("{} bytes of body", body.len());
    Ok(())
}
