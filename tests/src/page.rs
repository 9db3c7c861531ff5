//! The checkout page in one browser window, seen the way a shopper (and a
//! developer with devtools) sees it: one method per action or reading.
//! Everything is read from the DOM the page renders. One file because it
//! is one type: the page and what can be done and seen on it.

use crate::wait::{eventually, PATIENCE};
use anyhow::{anyhow, bail, Context, Result};
use fantoccini::actions::{InputSource, MouseActions, PointerAction, MOUSE_BUTTON_LEFT};
use fantoccini::elements::Element;
use fantoccini::key::Key;
use fantoccini::wd::WindowHandle;
use fantoccini::{Client, Locator};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::time::Duration;

pub use crate::shown::{
    ensure_one_key, Attempt, ListedCharge, Receipt, Reservation, SETTLED_RESERVATION,
};

/// A browser window showing the checkout page.
#[derive(Clone)]
pub struct Page {
    client: Client,
    window: WindowHandle,
    /// The shop's address as this shopper opens it.
    url: String,
}

impl Page {
    /// The page at `url` in the session's current window.
    pub async fn in_current_window(client: Client, url: &str) -> Result<Self> {
        let window = client.window().await?;
        Ok(Self {
            client,
            window,
            url: url.to_owned(),
        })
    }

    /// The page at `url` in `window` of a session.
    pub fn with_window(client: Client, window: WindowHandle, url: &str) -> Self {
        Self {
            client,
            window,
            url: url.to_owned(),
        }
    }

    /// A PNG of the whole page: the window is first made as tall as the page.
    pub async fn screenshot(&self) -> Result<Vec<u8>> {
        self.focus().await?;
        let (width, _) = self.client.get_window_size().await?;
        let chrome: i64 = self
            .eval("return window.outerHeight - window.innerHeight;")
            .await?;
        let height: i64 = self
            .eval("return document.documentElement.scrollHeight;")
            .await?;
        let height = u32::try_from((height + chrome.max(0)).clamp(600, 4000))?;
        self.client
            .set_window_size(u32::try_from(width)?, height)
            .await?;
        Ok(self.client.screenshot().await?)
    }

    /// A second window of the same browser (same cookies, same storage).
    pub async fn new_window(&self) -> Result<Page> {
        let created = self.client.new_window(false).await?;
        Ok(Page {
            client: self.client.clone(),
            window: created.handle,
            url: self.url.clone(),
        })
    }

    async fn focus(&self) -> Result<()> {
        self.client.switch_to_window(self.window.clone()).await?;
        Ok(())
    }

    /// Loads the shop and waits until the page has started.
    pub async fn open(&self) -> Result<()> {
        self.focus().await?;
        self.client.goto(&self.url).await?;
        self.wait_ready().await
    }

    /// Reloads the page (what a shopper's F5 does) and waits until it has started.
    pub async fn reload(&self) -> Result<()> {
        self.focus().await?;
        self.client.refresh().await?;
        self.wait_ready().await
    }

    async fn wait_ready(&self) -> Result<()> {
        self.wait_for(
            "the page to start",
            "document.documentElement.dataset.ready === 'true'",
        )
        .await
        .context("the page did not start (is www/pkg built? see the screenshot)")
    }

    /// Runs `body` (a JS function body ending in `return …`) in the page and
    /// reads its result.
    pub async fn eval<T: DeserializeOwned>(&self, body: &str) -> Result<T> {
        self.focus().await?;
        let value = self.client.execute(body, Vec::new()).await?;
        serde_json::from_value(value.clone())
            .with_context(|| format!("reading {value} from `{body}`"))
    }

    /// Waits up to [`PATIENCE`] until the JS expression `condition` is true.
    pub async fn wait_for(&self, what: &str, condition: &str) -> Result<()> {
        self.wait_for_within(what, condition, PATIENCE).await
    }

    /// Waits up to `timeout` until the JS expression `condition` is true.
    pub async fn wait_for_within(
        &self,
        what: &str,
        condition: &str,
        timeout: Duration,
    ) -> Result<()> {
        let body = format!("return !!({condition});");
        eventually(what, timeout, || async {
            let ok: bool = self.eval(&body).await?;
            Ok(ok.then_some(()))
        })
        .await
    }

    /// Waits until there is an element at `css` and `test`, a JS
    /// expression of it (`e`), is true.
    async fn wait_for_element(&self, css: &str, what: &str, test: &str) -> Result<()> {
        let selector = serde_json::to_string(css)?;
        self.wait_for(
            what,
            &format!(
                "(() => {{ const e = document.querySelector({selector}); return !!e && ({test}); }})()"
            ),
        )
        .await
    }

    /// The element at `css`, once it is shown and enabled.
    async fn usable(&self, css: &str) -> Result<Element> {
        self.wait_for_element(
            css,
            &format!("{css} to be shown and enabled"),
            "!e.disabled && e.offsetParent !== null",
        )
        .await?;
        Ok(self.client.find(Locator::Css(css)).await?)
    }

    /// Clicks the element at `css` once it is shown and enabled.
    pub async fn click(&self, css: &str) -> Result<()> {
        self.usable(css).await?.click().await?;
        Ok(())
    }

    /// Presses Enter on the element at `css`, as a keyboard user would.
    pub async fn press_enter_on(&self, css: &str) -> Result<()> {
        self.usable(css)
            .await?
            .send_keys(&Key::Enter.to_string())
            .await?;
        Ok(())
    }

    /// Double-clicks the element at `css` with the mouse: two presses, no pause.
    pub async fn double_click(&self, css: &str) -> Result<()> {
        let element = self.usable(css).await?;
        let mouse = MouseActions::new("mouse".into())
            .then(PointerAction::MoveToElement {
                element,
                duration: None,
                x: 0.0,
                y: 0.0,
            })
            .then(PointerAction::Down {
                button: MOUSE_BUTTON_LEFT,
            })
            .then(PointerAction::Up {
                button: MOUSE_BUTTON_LEFT,
            })
            .then(PointerAction::Down {
                button: MOUSE_BUTTON_LEFT,
            })
            .then(PointerAction::Up {
                button: MOUSE_BUTTON_LEFT,
            });
        self.client.perform_actions(mouse).await?;
        self.client.release_actions().await?;
        Ok(())
    }

    /// The text of the element at `css` ("" when absent).
    pub async fn text(&self, css: &str) -> Result<String> {
        let selector = serde_json::to_string(css)?;
        self.eval(&format!(
            "const e = document.querySelector({selector}); return e ? e.textContent.trim() : '';"
        ))
        .await
    }

    /// Waits until the element at `css` reads `text`.
    pub async fn wait_for_text(&self, css: &str, text: &str) -> Result<()> {
        let expected = serde_json::to_string(text)?;
        let test = format!("e.textContent.trim() === {expected}");
        self.wait_for_element(css, &format!("{css} to read {text:?}"), &test)
            .await
    }

    /// Waits until the element at `css` is shown and its text contains
    /// `words`.
    pub async fn wait_for_words(&self, css: &str, words: &str) -> Result<()> {
        let wanted = serde_json::to_string(words)?;
        let test = format!("!e.hidden && e.textContent.includes({wanted})");
        self.wait_for_element(css, &format!("{css} to say {words:?}"), &test)
            .await
    }

    /// Adds one of `sku` to the cart.
    pub async fn add_to_cart(&self, sku: &str) -> Result<()> {
        self.click(&format!("button[data-add=\"{sku}\"]")).await
    }

    /// Picks what goes wrong on the next payment in the chaos panel.
    pub async fn choose_chaos(&self, value: &str) -> Result<()> {
        self.pick("#chaos", "chaos", value).await
    }

    /// Picks the card to pay with (a provider's test card, `pm_card_…`).
    pub async fn choose_card(&self, card: &str) -> Result<()> {
        self.pick("#card-choice", "card", card).await
    }

    /// Clicks the radio button `name` = `value` inside `within` and waits
    /// until it is checked.
    async fn pick(&self, within: &str, name: &str, value: &str) -> Result<()> {
        let css = format!("{within} input[name=\"{name}\"][value=\"{value}\"]");
        self.click(&css).await?;
        self.wait_for_element(&css, &format!("{name} {value} to be picked"), "e.checked")
            .await
    }

    /// Clicks Pay.
    pub async fn pay(&self) -> Result<()> {
        self.click("#pay").await
    }

    /// The cart's state: `open`, `paying`, `pending`, `paid` or `failed`.
    pub async fn cart_state(&self) -> Result<String> {
        self.eval("return document.querySelector('#cart').dataset.state;")
            .await
    }

    /// Waits until the cart's state is `state` (see [`Page::cart_state`]).
    pub async fn wait_for_cart(&self, state: &str) -> Result<()> {
        self.wait_for(
            &format!("the cart to be {state}"),
            &format!("document.querySelector('#cart').dataset.state === '{state}'"),
        )
        .await
    }

    /// Waits until a `POST /charges` of this page is in flight (the
    /// attempt log shows it pending).
    pub async fn wait_for_payment_in_flight(&self) -> Result<()> {
        self.wait_for(
            "a payment attempt to be in flight",
            "[...document.querySelectorAll('#attempts tbody tr')] \
               .some(r => r.dataset.path === '/charges' && r.dataset.status === 'pending')",
        )
        .await
    }

    /// The id of the cart this page shows.
    pub async fn cart_id(&self) -> Result<String> {
        let shown = self.text("#cart-id").await?;
        shown
            .strip_prefix('#')
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("unexpected cart id {shown:?}"))
    }

    /// Waits until the page shows a receipt, and reads it.
    pub async fn wait_for_receipt(&self) -> Result<Receipt> {
        self.wait_for(
            "the receipt",
            "document.querySelector('#cart').dataset.state === 'paid' && !document.querySelector('#receipt').hidden",
        )
        .await?;
        self.receipt().await
    }

    /// Waits until the page shows a receipt, and reads it and the attempt
    /// log's rows for `POST /charges` that led to it.
    pub async fn wait_for_receipt_and_attempts(&self) -> Result<(Receipt, Vec<Attempt>)> {
        let receipt = self.wait_for_receipt().await?;
        Ok((receipt, self.charge_attempts().await?))
    }

    /// The receipt the page shows now.
    pub async fn receipt(&self) -> Result<Receipt> {
        self.eval(
            "const r = document.querySelector('#receipt'); \
             return { charge_id: r.dataset.chargeId, key: r.dataset.key, \
                      replayed: r.dataset.replayed === 'true', \
                      attempts: Number(document.querySelector('#receipt-attempts').textContent), \
                      provider_charge: r.dataset.providerCharge || null, mail: r.dataset.mail || 'none' };",
        )
        .await
    }

    /// Whether the element that has the keyboard focus matches `css`.
    pub async fn focused(&self, css: &str) -> Result<bool> {
        let selector = serde_json::to_string(css)?;
        self.eval(&format!(
            "return !!document.activeElement && document.activeElement.matches({selector});"
        ))
        .await
    }

    /// What the page's element with the keyboard focus is, for reports.
    pub async fn focus_description(&self) -> Result<String> {
        self.eval(
            "const e = document.activeElement; \
             return e ? `${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''} ${e.getAttribute('aria-label') || e.textContent.trim().slice(0, 40)}` : 'nothing';",
        )
        .await
    }

    /// Every reservation outcome the page shows, in its order.
    pub async fn reservations(&self) -> Result<Vec<Reservation>> {
        self.eval(
            "return [...document.querySelectorAll('.reserve [data-result]')] \
               .map(e => ({ result: e.dataset.result, text: e.textContent.trim() }));",
        )
        .await
    }

    /// Waits until at least `count` reservations show one of `results`,
    /// and reads every reservation the page shows.
    pub async fn wait_for_reservations(
        &self,
        results: &[&str],
        count: usize,
    ) -> Result<Vec<Reservation>> {
        let wanted = serde_json::to_string(results)?;
        self.wait_for(
            &format!("{count} reservation(s) to show {results:?}"),
            &format!(
                "[...document.querySelectorAll('.reserve [data-result]')] \
                   .filter(e => {wanted}.includes(e.dataset.result)).length >= {count}"
            ),
        )
        .await?;
        self.reservations().await
    }

    /// Leaves the shop for another page of its origin, as a shopper who
    /// closes the tab and comes back later would; the shop's storage is
    /// still reachable from there. (`/style.css`: both engines show it as
    /// a document that runs scripts; Firefox runs none in its JSON viewer
    /// and downloads `/metrics`.)
    pub async fn leave(&self) -> Result<()> {
        self.focus().await?;
        let origin: String = self.eval("return location.origin;").await?;
        self.client.goto(&format!("{origin}/style.css")).await?;
        Ok(())
    }

    /// Runs `body`, a JS async function body ending in `return …`, in the
    /// page and waits for its result.
    pub async fn eval_async<T: DeserializeOwned>(&self, body: &str) -> Result<T> {
        self.focus().await?;
        let script = format!(
            "const done = arguments[arguments.length - 1]; \
             (async () => {{ {body} }})().then(v => done({{ ok: v }}), e => done({{ error: String(e && e.stack || e) }}));"
        );
        let value = self.client.execute_async(&script, Vec::new()).await?;
        if let Some(error) = value.get("error") {
            bail!("`{body}` failed in the page: {error}");
        }
        serde_json::from_value(value["ok"].clone())
            .with_context(|| format!("reading {value} from `{body}`"))
    }

    /// Every row of the attempt log, oldest first, with the times the
    /// page recorded for it.
    pub async fn attempts(&self) -> Result<Vec<Attempt>> {
        self.eval(
            "return [...document.querySelectorAll('#attempts tbody tr')].map(r => ({ \
               key: r.dataset.key, path: r.dataset.path, status: r.dataset.status, \
               replayed: r.dataset.replayed === 'true', start: Number(r.dataset.start), \
               end: r.dataset.end === '' ? null : Number(r.dataset.end) }));",
        )
        .await
    }

    /// The attempt log's rows for `POST /charges`.
    pub async fn charge_attempts(&self) -> Result<Vec<Attempt>> {
        Ok(self
            .attempts()
            .await?
            .into_iter()
            .filter(|a| a.path == "/charges")
            .collect())
    }

    /// Clicks "Refresh" in "Your charges", waits for the new list and reads it.
    pub async fn listed_charges(&self) -> Result<Vec<ListedCharge>> {
        let loads: String = self
            .eval("return document.querySelector('#charges').dataset.loads || '0';")
            .await?;
        let loads: u64 = loads.parse()?;
        self.click("#refresh-charges").await?;
        self.wait_for(
            "the charges list to reload",
            &format!("Number(document.querySelector('#charges').dataset.loads || 0) > {loads}"),
        )
        .await?;
        self.eval(
            "return [...document.querySelectorAll('#charges li')].map(li => ({ \
               id: li.dataset.chargeId, description: li.dataset.description }));",
        )
        .await
    }

    /// The value of this browser's `sid` session cookie.
    pub async fn sid(&self) -> Result<String> {
        self.focus().await?;
        let cookie = self
            .client
            .get_named_cookie("sid")
            .await
            .context("the page set no sid cookie")?;
        Ok(cookie.value().to_owned())
    }

    /// What the page shows, for a failure report.
    pub async fn describe(&self) -> String {
        let result: Result<Value> = self
            .eval(
                "const t = s => { const e = document.querySelector(s); return e ? e.textContent.trim() : null; }; \
                 return { url: location.href, ready: document.documentElement.dataset.ready || null, \
                   cart: document.querySelector('#cart')?.dataset.state, status: t('#status'), \
                   notice: t('#resume-notice'), failure: t('#failure'), boot_error: t('#boot-error'), \
                   charges: t('#charges-summary'), reservations: t('#reservations'), \
                   attempts: [...document.querySelectorAll('#attempts tbody tr')] \
                     .map(r => [...r.cells].map(c => c.textContent.trim()).join(' | ')) };",
            )
            .await;
        match result {
            Ok(value) => serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string()),
            Err(e) => format!("(could not read the page: {e:#})"),
        }
    }
}
