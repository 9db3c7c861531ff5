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
