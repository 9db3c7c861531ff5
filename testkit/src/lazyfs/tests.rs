//! The file system's own promises, on a real mount (root and `/dev/fuse`).

use super::*;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};

fn read(path: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    File::open(path).unwrap().read_to_end(&mut bytes).unwrap();
    bytes
}

#[test]
fn a_cut_keeps_what_was_fsynced_and_drops_what_was_not() {
    let mut fs = LazyFs::mount().unwrap();
    let synced = fs.path().join("synced");
    let mut file = File::create(&synced).unwrap();
    file.write_all(b"kept").unwrap();
    file.sync_data().unwrap();
    file.write_all(b" and lost").unwrap();
    drop(file);
    let never = fs.path().join("never");
    std::fs::write(&never, vec![7; 100_000]).unwrap();
    // Before the cut, readers see everything written.
    assert_eq!(read(&synced), b"kept and lost");
    assert_eq!(read(&never).len(), 100_000);

    let (pages, files) = fs.cut();
    assert!(pages >= 25 && files == 2, "{pages} pages, {files} files");
    fs.remount().unwrap();
    assert_eq!(read(&synced), b"kept");
    // Created (metadata), never synced (data).
    assert_eq!(read(&never), b"");
    assert_eq!(fs.stats().cuts, 1);
}

#[test]
fn after_a_cut_nothing_reads_or_writes_until_the_remount() {
    let mut fs = LazyFs::mount().unwrap();
    let path = fs.path().join("file");
    std::fs::write(&path, b"x").unwrap();
    fs.cut();
    let error = std::fs::write(&path, b"y").unwrap_err();
    assert_eq!(error.raw_os_error(), Some(5), "EIO: {error}");
    assert!(File::open(&path).is_err());
    fs.remount().unwrap();
    std::fs::write(&path, b"y").unwrap();
    assert_eq!(read(&path), b"y");
}

#[test]
fn a_rename_and_a_truncate_persist_at_once_the_data_only_once_synced() {
    let mut fs = LazyFs::mount().unwrap();
    let (from, to) = (fs.path().join("from"), fs.path().join("to"));
    let mut file = File::create(&from).unwrap();
    file.write_all(b"hello world").unwrap();
    file.sync_all().unwrap();
    file.set_len(5).unwrap();
    file.write_all(b"!").unwrap(); // at offset 11: a hole, then "!"
    drop(file);
    std::fs::rename(&from, &to).unwrap();
    assert_eq!(read(&to), b"hello\0\0\0\0\0\0!");
    fs.cut();
    fs.remount().unwrap();
    assert!(!from.exists());
    assert_eq!(read(&to), b"hello");
}

#[test]
fn a_sync_through_one_descriptor_keeps_what_another_wrote() {
    let mut fs = LazyFs::mount().unwrap();
    let path = fs.path().join("shared");
    std::fs::write(&path, b"").unwrap();
    let mut writer = OpenOptions::new().append(true).open(&path).unwrap();
    writer.write_all(b"written here").unwrap();
    drop(writer);
    File::open(&path).unwrap().sync_all().unwrap();
    fs.cut();
    fs.remount().unwrap();
    assert_eq!(read(&path), b"written here");
}

/// A failed fsync (a disk error at write-back) syncs nothing and says so
/// (`EIO`); what was written stays readable, as in a page cache, until a
/// cut drops it. Only the next fsync of a matching file fails.
#[test]
fn a_failed_fsync_syncs_nothing_and_keeps_the_pages_readable() {
    let mut fs = LazyFs::mount().unwrap();
    let (wal, other) = (fs.path().join("db-wal"), fs.path().join("db"));
    let mut file = File::create(&wal).unwrap();
    file.write_all(b"frames").unwrap();
    fs.fail_next_fsync("-wal");
    std::fs::write(&other, b"page").unwrap();
    File::open(&other).unwrap().sync_all().unwrap();
    let error = file.sync_data().unwrap_err();
    assert_eq!(error.raw_os_error(), Some(5), "EIO: {error}");
    assert_eq!(read(&wal), b"frames", "still readable");
    assert_eq!(fs.stats().failed_syncs, 1);
    drop(file);
    fs.cut();
    fs.remount().unwrap();
    assert_eq!(read(&wal), b"", "never synced");
    assert_eq!(read(&other), b"page");
}
