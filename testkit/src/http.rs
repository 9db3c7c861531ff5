//! Reading the answers of the processes under test: a GET that must
//! answer 200 (with JSON), and a listing read whole through its
//! `has_more` pages. Every error names the request and shows the body, so
//! an endpoint that broke cannot pass for one that has nothing to show.

use anyhow::{anyhow, bail, Context, Result};
use reqwest::{RequestBuilder, StatusCode};
use serde_json::Value;

/// Sends `request` and reads its body; an error unless it answers 200.
/// `what` names the request in errors (`psp: GET /v1/charges`).
pub(crate) async fn text_200(request: RequestBuilder, what: &str) -> Result<String> {
    let response = request.send().await.with_context(|| what.to_owned())?;
    let status = response.status();
    let text = response
        .text()
        .await
        .with_context(|| format!("{what}: reading the body"))?;
    if status != StatusCode::OK {
        bail!("{what} answered {status}: {text}");
    }
    Ok(text)
}

/// The same, with the body read as JSON; an error unless it is.
pub(crate) async fn json_200(request: RequestBuilder, what: &str) -> Result<Value> {
    let text = text_200(request, what).await?;
    serde_json::from_str(&text).with_context(|| format!("{what} answered no JSON: {text}"))
}

/// Every item of the listing at `path` (with its query, such as
/// `/charges?limit=1000`), in the listing's order, following `has_more`
/// pages with `starting_after` the last item's id. `get` makes the GET of
/// a path; `who` starts every error (`psp: `, or nothing). An error unless
/// each page is a 200 with a `data` array and a boolean `has_more`.
pub(crate) async fn all_pages(
    who: &str,
    path: &str,
    get: impl Fn(&str) -> RequestBuilder,
) -> Result<Vec<Value>> {
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut page_path = path.to_owned();
        if let Some(id) = &after {
            page_path.push_str("&starting_after=");
            page_path.push_str(id);
        }
        let what = format!("{who}GET {page_path}");
        let page = json_200(get(&page_path), &what).await?;
        let data = page["data"]
            .as_array()
            .ok_or_else(|| anyhow!("{what} answered no `data` array: {page}"))?;
        let has_more = page["has_more"]
            .as_bool()
            .ok_or_else(|| anyhow!("{what} answered no boolean `has_more`: {page}"))?;
        all.extend(data.iter().cloned());
        if !has_more {
            return Ok(all);
        }
        let last = data
            .last()
            .and_then(|item| item["id"].as_str())
            .ok_or_else(|| anyhow!("{what}: has_more with no last id: {page}"))?;
        after = Some(last.to_owned());
    }
}
