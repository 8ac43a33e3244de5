import Foundation

/// Starting the writeback of a file's dirty pages without waiting for it.
///
/// A download that only syncs at the end leaves the whole file dirty in the
/// page cache, and the final fsync then waits for all of it (0.47-0.58 s of a
/// 1.2-1.4 s download of 1 GiB here). Started as data arrives, the disk writes
/// while the network delivers and the final fsync finds little left: 1 GiB
/// from nginx on loopback went from 1.26-1.74 s to 0.86-1.09 s.
enum Writeback {
    /// Written byte ranges are handed to the disk in pieces of this size
    /// (4 MiB and 8 MiB measured alike, 32 MiB slightly slower).
    static let chunk: Int64 = 8 << 20

    /// Starts writing back the whole file from a thread of its own, so that the
    /// caller does not wait. sync_file_range can sleep: the block layer's
    /// writeback throttling (wbt) holds a writer while the disk's queue is full,
    /// and a finished file's writeback started on one of the two threads Swift's
    /// concurrency runs jobs on stopped half the queue's work for it (46 ms of a
    /// 0.43 s run of 1,000 x 256 KiB; slower runs had 0.12-0.22 s of iowait with
    /// a core idle). The descriptor is duplicated and closed when done.
    /// Skipped when `maxPending` starts are already waiting (the caller's sync
    /// then writes that file, as it would anyway): a slow disk must not pile up
    /// descriptors.
    static func startDetached(_ fd: Int32) {
        #if os(Linux)
        guard detachedPending.withLock({ pending -> Bool in
            guard pending < maxPending else { return false }
            pending += 1
            return true
        }) else { return }
        // Close-on-exec: a hook's command started meanwhile must not inherit it.
        let copy = fcntl(fd, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else {
            detachedPending.withLock { $0 -= 1 }
            return
        }
        detachedQueue.async {
            start(copy, offset: 0, count: 0)
            close(copy)
            detachedPending.withLock { $0 -= 1 }
        }
        #endif
    }

    /// Returns when every detached start made so far has finished (for tests).
    static func waitForDetached() {
        detachedQueue.sync {}
    }

    /// Detached starts that may wait at once (each holds a descriptor).
    static let maxPending = 64
    private static let detachedPending = Locked(0)
    /// Where detached starts run, one at a time (internal: a test holds it to reach the cap).
    static let detachedQueue = DispatchQueue(label: "transferd.writeback")

    /// Starts writing back `count` bytes from `offset` (0: to the end of the file).
    static func start(_ fd: Int32, offset: Int64, count: Int64) {
        #if os(Linux)
        // SYNC_FILE_RANGE_WRITE: queue the dirty pages for writing; returns without waiting.
        _ = linuxSyncFileRange(fd, offset, count, 2)
        #endif
    }
}

/// The identity of the running boot of the machine. Bytes written but not
/// synced survive a killed process (they are in the page cache) but not a
/// crash of the machine; a checkpoint that claims such bytes names the boot,
/// and a later run trusts them only in the same one.
package enum BootID {
    package static let current: String? = {
        #if os(Linux)
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else { return nil }
        let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return id.isEmpty ? nil : id
        #else
        return nil // no boot identity read: only synced bytes are trusted
        #endif
    }()
}

#if os(Linux)
/// sync_file_range(2) (declared only under _GNU_SOURCE, which Swift's Glibc module lacks).
@_silgen_name("sync_file_range")
private func linuxSyncFileRange(_ fd: Int32, _ offset: Int64, _ count: Int64, _ flags: UInt32) -> Int32
#endif
