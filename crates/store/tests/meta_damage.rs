//! Damaged stream metadata on real files: one bad file of meta.inf / meta.sum / meta.bak is
//! restored from the others and the stream opens with its messages and incarnation; when no
//! metadata file verifies the stream is refused with every file left in place, is never
//! created again empty, and `Store::repair_stream` (`sluice stream repair`) brings it back with
//! its messages.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sluice_store::{
    Headers, MetaFile, Store, StoreError, StoreOptions, StreamConfig, StreamHandle, SyncPolicy,
};

const NAME: &str = "K";
const PAYLOADS: [&str; 3] = ["m1", "m2", "m3"];

fn opts() -> StoreOptions {
    StoreOptions {
        sync: SyncPolicy::Always,
        ..StoreOptions::default()
    }
}

fn config() -> StreamConfig {
    StreamConfig::new(NAME, ["k.>"])
}

/// A data directory holding stream `K` with three messages, closed.
struct Fixture {
    dir: tempfile::TempDir,
    incarnation: u64,
}

impl Fixture {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path(), opts()).unwrap();
        let stream = store.create_stream(config()).unwrap();
        for payload in PAYLOADS {
            stream
                .publish("k.a", Headers::new(), payload)
                .await
                .unwrap();
        }
        let incarnation = stream.info(None).incarnation;
        store.close();
        Self { dir, incarnation }
    }

    fn stream_dir(&self) -> PathBuf {
        self.dir.path().join("streams").join(NAME)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.stream_dir().join(name)
    }

    fn open(&self) -> (Store, Vec<String>) {
        let (store, reports) = Store::open(self.dir.path(), opts()).unwrap();
        let warnings = reports
            .into_iter()
            .filter(|r| r.stream == NAME)
            .flat_map(|r| r.warnings)
            .collect();
        (store, warnings)
    }

    /// Every file under the data directory but the lock, with its bytes.
    fn files(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        sluice_test_support::files_under(&self.dir.path().join("streams"))
    }

    /// Opens the store and checks that `K` is there with its three messages and the original
    /// incarnation, that a warning names `damaged` and meta.bak, and that the next open is clean
    /// (the damaged file was restored).
    fn assert_recovered_from_the_copy(&self, damaged: &str) {
        let (store, warnings) = self.open();
        let stream = store.stream(NAME).expect("the stream opens from meta.bak");
        assert_eq!(stream.info(None).incarnation, self.incarnation);
        assert_eq!(payloads(&stream), PAYLOADS);
        let warning = warnings.join("\n");
        assert!(warning.contains(damaged), "{warning}");
        assert!(
            warning.contains(&self.file("meta.bak").display().to_string()),
            "{warning}"
        );
        store.close();
        let (store, warnings) = self.open();
        assert_eq!(warnings, Vec::<String>::new(), "restored on the first open");
        assert_eq!(
            store.stream(NAME).unwrap().info(None).incarnation,
            self.incarnation
        );
    }
}

fn payloads(stream: &StreamHandle) -> Vec<String> {
    (1..=stream.info(None).state.last_seq)
        .filter_map(|seq| stream.get(seq).unwrap())
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect()
}

fn flip_a_byte(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(path, bytes).unwrap();
}

fn zero(path: &Path) {
    let len = std::fs::metadata(path).unwrap().len();
    std::fs::write(path, vec![0u8; len as usize]).unwrap();
}

fn delete(path: &Path) {
    std::fs::remove_file(path).unwrap();
}

#[tokio::test]
async fn a_flipped_byte_in_meta_inf_opens_from_the_copy() {
    let fx = Fixture::new().await;
    flip_a_byte(&fx.file("meta.inf"));
    fx.assert_recovered_from_the_copy("meta.inf does not match meta.sum");
}

#[tokio::test]
async fn a_zeroed_meta_inf_opens_from_the_copy() {
    let fx = Fixture::new().await;
    zero(&fx.file("meta.inf"));
    fx.assert_recovered_from_the_copy("meta.inf does not match meta.sum");
}

#[tokio::test]
async fn a_deleted_meta_inf_opens_from_the_copy() {
    let fx = Fixture::new().await;
    delete(&fx.file("meta.inf"));
    fx.assert_recovered_from_the_copy("meta.inf is missing");
}

#[tokio::test]
async fn a_flipped_byte_in_meta_sum_opens_from_the_copy() {
    let fx = Fixture::new().await;
    flip_a_byte(&fx.file("meta.sum"));
    fx.assert_recovered_from_the_copy("meta.inf does not match meta.sum");
}

#[tokio::test]
async fn a_zeroed_meta_sum_opens_from_the_copy() {
    let fx = Fixture::new().await;
    zero(&fx.file("meta.sum"));
    fx.assert_recovered_from_the_copy("meta.inf does not match meta.sum");
}

#[tokio::test]
async fn a_deleted_meta_sum_opens_from_the_copy() {
    let fx = Fixture::new().await;
    delete(&fx.file("meta.sum"));
    fx.assert_recovered_from_the_copy("meta.sum is missing");
}

#[tokio::test]
async fn a_damaged_copy_is_rewritten_from_meta_inf() {
    let fx = Fixture::new().await;
    flip_a_byte(&fx.file("meta.bak"));
    let (store, warnings) = fx.open();
    assert_eq!(payloads(&store.stream(NAME).unwrap()), PAYLOADS);
    let warning = warnings.join("\n");
    assert!(
        warning.contains("meta.bak does not match its checksum line; rewritten from meta.inf"),
        "{warning}"
    );
    store.close();
    assert_eq!(fx.open().1, Vec::<String>::new());
}

#[tokio::test]
async fn a_stream_written_before_the_copy_existed_gets_one_when_opened() {
    let fx = Fixture::new().await;
    delete(&fx.file("meta.bak"));
    let (store, warnings) = fx.open();
    assert_eq!(
        warnings,
        Vec::<String>::new(),
        "a missing copy is no damage"
    );
    assert!(fx.file("meta.bak").exists());
    store.close();
    flip_a_byte(&fx.file("meta.inf"));
    fx.assert_recovered_from_the_copy("meta.inf does not match meta.sum");
}

#[tokio::test]
async fn a_configuration_update_reaches_the_copy() {
    let fx = Fixture::new().await;
    let (store, _) = fx.open();
    let updated = StreamConfig {
        max_msgs: 10,
        ..config()
    };
    store.update_stream(updated.clone()).await.unwrap();
    store.close();
    flip_a_byte(&fx.file("meta.inf"));
    fx.assert_recovered_from_the_copy("meta.inf does not match meta.sum");
    let (store, _) = fx.open();
    assert_eq!(store.stream(NAME).unwrap().config(), updated);
}

#[tokio::test]
async fn an_older_copy_left_by_a_crash_mid_update_is_rewritten_from_meta_inf() {
    let fx = Fixture::new().await;
    let older = std::fs::read(fx.file("meta.bak")).unwrap();
    let (store, _) = fx.open();
    let updated = StreamConfig {
        max_msgs: 10,
        ..config()
    };
    store.update_stream(updated.clone()).await.unwrap();
    store.close();
    std::fs::write(fx.file("meta.bak"), older).unwrap();
    let (store, warnings) = fx.open();
    assert_eq!(store.stream(NAME).unwrap().config(), updated);
    let warning = warnings.join("\n");
    assert!(
        warning.contains("meta.bak held older metadata than meta.inf; rewritten from meta.inf"),
        "{warning}"
    );
    store.close();
    assert_eq!(fx.open().1, Vec::<String>::new());
}

/// Checks that `K` is refused with every file in place: the report and `create_stream` name
/// `named` (each a file name) and the repair command, and no directory is moved aside.
fn assert_refused_in_place(fx: &Fixture, named: &[&str]) -> Store {
    let before = fx.files();
    let (store, warnings) = fx.open();
    assert!(store.stream(NAME).is_none());
    let refusal = store.refused_streams();
    assert_eq!(refusal.len(), 1);
    assert_eq!(refusal[0].stream, NAME);
    let created = store.create_stream(config()).unwrap_err();
    assert!(matches!(created, StoreError::Refused(_)), "{created:?}");
    for text in [warnings.join("\n"), created.to_string()] {
        for file in named {
            let path = fx.file(file).display().to_string();
            assert!(text.contains(&path), "{path} not in: {text}");
        }
        assert!(text.contains("sluice stream repair K"), "{text}");
    }
    assert_eq!(fx.files(), before, "every file left as it was");
    let dirs: Vec<_> = std::fs::read_dir(fx.dir.path().join("streams"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(dirs, [NAME], "nothing moved aside");
    store
}

/// Repairs `K` with the declared configuration and checks it opens with its messages under a
/// new incarnation, now and after a reopen.
fn assert_repaired_with_a_new_incarnation(fx: &Fixture, store: Store) {
    let repair = store
        .repair_stream(NAME, Some(config()))
        .unwrap()
        .expect("a refused stream is repaired");
    assert_eq!(repair.kept_from, None);
    assert!(repair.declared_config);
    assert_ne!(repair.incarnation, fx.incarnation);
    let stream = store.stream(NAME).expect("loaded by the repair");
    assert_eq!(stream.info(None).incarnation, repair.incarnation);
    assert_eq!(payloads(&stream), PAYLOADS);
    assert!(store.refused_streams().is_empty());
    store.close();
    let (store, warnings) = fx.open();
    assert_eq!(warnings, Vec::<String>::new());
    let stream = store.stream(NAME).unwrap();
    assert_eq!(stream.info(None).incarnation, repair.incarnation);
    assert_eq!(payloads(&stream), PAYLOADS);
}

#[tokio::test]
async fn both_copies_damaged_is_refused_in_place_then_repaired() {
    let fx = Fixture::new().await;
    flip_a_byte(&fx.file("meta.inf"));
    flip_a_byte(&fx.file("meta.bak"));
    let store = assert_refused_in_place(&fx, &["meta.inf", "meta.bak"]);
    assert_repaired_with_a_new_incarnation(&fx, store);
}

#[tokio::test]
async fn meta_inf_deleted_and_copy_zeroed_is_refused_in_place_then_repaired() {
    let fx = Fixture::new().await;
    delete(&fx.file("meta.inf"));
    zero(&fx.file("meta.bak"));
    let store = assert_refused_in_place(&fx, &["meta.inf", "meta.bak"]);
    assert_repaired_with_a_new_incarnation(&fx, store);
}

#[tokio::test]
async fn a_deleted_meta_sum_without_a_copy_is_refused_even_though_meta_inf_parses() {
    let fx = Fixture::new().await;
    delete(&fx.file("meta.bak"));
    delete(&fx.file("meta.sum"));
    let store = assert_refused_in_place(&fx, &["meta.sum", "meta.bak"]);
    assert_repaired_with_a_new_incarnation(&fx, store);
}

#[tokio::test]
async fn repair_without_a_declared_configuration_or_a_verified_copy_changes_nothing() {
    let fx = Fixture::new().await;
    flip_a_byte(&fx.file("meta.inf"));
    delete(&fx.file("meta.bak"));
    let before = fx.files();
    let (store, _) = fx.open();
    let err = store.repair_stream(NAME, None).unwrap_err();
    assert!(matches!(err, StoreError::RepairNeedsConfig(_)), "{err:?}");
    assert!(err.to_string().contains("--config"), "{err}");
    assert_eq!(fx.files(), before);
    let wrong = StreamConfig::new("OTHER", ["o"]);
    assert!(store.repair_stream(NAME, Some(wrong)).is_err());
    assert_eq!(fx.files(), before);
}

#[tokio::test]
async fn repair_of_a_loaded_stream_has_nothing_to_do() {
    let fx = Fixture::new().await;
    let (store, _) = fx.open();
    let before = fx.files();
    assert!(store.repair_stream(NAME, Some(config())).unwrap().is_none());
    assert_eq!(fx.files(), before);
}

#[tokio::test]
async fn a_directory_not_loaded_is_never_created_over_and_repair_keeps_its_incarnation() {
    let fx = Fixture::new().await;
    let away = fx.dir.path().join("away");
    std::fs::rename(fx.stream_dir(), &away).unwrap();
    let (store, _) = fx.open();
    std::fs::rename(&away, fx.stream_dir()).unwrap();
    let before = fx.files();
    let err = store.create_stream(config()).unwrap_err();
    assert!(matches!(err, StoreError::DirectoryInUse { .. }), "{err:?}");
    assert!(err.to_string().contains("sluice stream repair K"), "{err}");
    assert_eq!(fx.files(), before, "nothing written over or moved");

    let repair = store.repair_stream(NAME, None).unwrap().unwrap();
    assert_eq!(repair.kept_from, Some(MetaFile::Inf));
    assert!(!repair.declared_config);
    assert_eq!(repair.incarnation, fx.incarnation);
    assert_eq!(payloads(&store.stream(NAME).unwrap()), PAYLOADS);
}
