//! Where `localStorage` refuses writes, keys live in page memory.

use super::*;

/// Fills localStorage to the brim; removes the filler when dropped.
struct FullStorage {
    names: Vec<String>,
}

impl FullStorage {
    fn fill() -> Self {
        let storage = local_storage();
        let mut names = Vec::new();
        let mut size = 1 << 20;
        while size >= 1 {
            let chunk = "x".repeat(size);
            loop {
                let name = String::from("filler-") + &names.len().to_string();
                if storage.set_item(&name, &chunk).is_err() {
                    break;
                }
                names.push(name);
            }
            size /= 2;
        }
        assert!(
            storage.set_item("filler-probe", "1").is_err(),
            "storage is full"
        );
        FullStorage { names }
    }
}

impl Drop for FullStorage {
    fn drop(&mut self) {
        let storage = local_storage();
        for name in &self.names {
            let _ = storage.remove_item(name);
        }
    }
}

/// Counts `console.warn` calls; restores it when dropped.
struct WarnCounter {
    original: JsValue,
    count: std::rc::Rc<std::cell::Cell<u32>>,
    _hook: Closure<dyn FnMut(JsValue)>,
}

impl WarnCounter {
    fn install() -> Self {
        let console = get(&js::global(), "console");
        let original = get(&console, "warn");
        let count = std::rc::Rc::new(std::cell::Cell::new(0));
        let hook = {
            let count = count.clone();
            Closure::<dyn FnMut(JsValue)>::new(move |_message: JsValue| count.set(count.get() + 1))
        };
        let f: &Function = hook.as_ref().unchecked_ref();
        set(&console, "warn", f.clone());
        WarnCounter {
            original,
            count,
            _hook: hook,
        }
    }
}

impl Drop for WarnCounter {
    fn drop(&mut self) {
        set(
            &get(&js::global(), "console"),
            "warn",
            self.original.clone(),
        );
    }
}

/// With localStorage full, keys live in page memory: still one per
/// operation across instances, still sent, and the page is told once.
#[wasm_bindgen_test]
async fn storage_quota_exceeded_falls_back_to_memory() {
    let setup = Setup::new();
    let warnings = WarnCounter::install();
    let full = FullStorage::fill();

    let client = setup.client(None);
    let key = client.key_for("full".into()).unwrap();
    assert!(is_uuid_v4(&key));
    assert_eq!(setup.client(None).key_for("full".into()).unwrap(), key);
    let outcome = post(&client, 1000, "full").await;
    assert_eq!(outcome.status, 201, "{outcome:?}");
    assert_eq!(outcome.key, key);
    let again = post(&setup.client(None), 1000, "full").await;
    assert!(again.replayed);
    // Once per page: none here when an earlier test of this page (the
    // `persistent` one) fell back already.
    assert!(
        warnings.count.get() <= 1,
        "{} warnings",
        warnings.count.get()
    );
    assert!(!client.persistent());
    assert!(setup.stored("full").is_none());

    drop(full);
    drop(warnings);
    assert_eq!(setup.charges().await, 1);
}

/// Storage that fills up mid-payment, seen from two tabs: the first
/// attempt charged but its answer was lost, then the page's other data
/// took the rest of the quota. Two windows then pay the same operation at
/// once: both read the key stored before storage filled up and send it,
/// keep what they write from then on in their own page memory (each says
/// so once on its console, and `persistent` turns `false`), and the
/// server runs the operation once.
#[wasm_bindgen_test]
async fn two_tabs_on_a_full_storage_send_the_key_stored_before_it_filled() {
    let setup = Setup::new();
    // The answer comes after the client stopped waiting (a dropped
    // connection would not do: Chromium resends the POST itself).
    let lost = setup.client_with(
        Some("delay-after-commit=1500"),
        &[("maxAttempts", 1.into()), ("timeoutMs", 300.into())],
    );
    let first = rejected(pay(&lost, 1100, "filled", JsValue::UNDEFINED)).await;
    assert_eq!(first.kind, "exhausted", "{first:?}");
    let key = first.key.expect("the lost attempt's key");
    assert_eq!(setup.charges().await, 1, "the lost attempt charged");

    let full = FullStorage::fill();
    let results =
        frames::pay_in_windows(server(), &setup.options(None), "filled", &charge(1100)).await;
    drop(full);
    for i in 0..2 {
        let (tab_key, replayed) = paid_in_memory(&results.get(i), i);
        assert_eq!(tab_key, key, "tab {i}: {results:?}");
        assert!(replayed, "tab {i}: {results:?}");
    }
    assert_eq!(setup.charges().await, 1);
}

/// Storage full before anything was paid: two windows pay a new
/// operation at once. The first through the operation's Web Lock makes
/// the key and keeps it in page memory; the second, in memory too, asks
/// the other tabs for the operation's record before sending a key of its
/// own, gets the first one's and sends that key: the server answers it
/// from its record, one charge. Each window says once on its console that
/// its keys are in page memory.
#[wasm_bindgen_test]
async fn two_tabs_on_a_storage_full_from_the_start_share_one_key() {
    let setup = Setup::new();
    let full = FullStorage::fill();
    let results =
        frames::pay_in_windows(server(), &setup.options(None), "full-first", &charge(1200)).await;
    drop(full);
    let mut keys = Vec::new();
    let mut replayed = 0;
    for i in 0..2 {
        let (key, was_replayed) = paid_in_memory(&results.get(i), i);
        replayed += u32::from(was_replayed);
        keys.push(key);
    }
    assert_eq!(keys[0], keys[1], "one key for both tabs: {results:?}");
    assert_eq!(
        replayed, 1,
        "the second tab's answer is a replay: {results:?}"
    );
    assert_eq!(setup.charges().await, 1);
}

/// One window's report from `pay_in_windows`, which must say: paid (201),
/// its keys in page memory only, said once on its console. Its key, and
/// whether its answer was a replay.
fn paid_in_memory(tab: &JsValue, i: u32) -> (String, bool) {
    assert!(get(tab, "error").is_undefined(), "tab {i}: {tab:?}");
    assert_eq!(get(tab, "status").as_f64(), Some(201.0), "tab {i}: {tab:?}");
    let persistent = get(tab, "persistent").as_bool();
    assert_eq!(persistent, Some(false), "tab {i}: {tab:?}");
    assert_eq!(get(tab, "warnings").as_f64(), Some(1.0), "tab {i}: {tab:?}");
    let key = get(tab, "key").as_string().expect("a key");
    (key, get(tab, "replayed").as_bool() == Some(true))
}
