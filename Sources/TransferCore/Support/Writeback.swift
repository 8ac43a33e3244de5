import Foundation

/// Starting the writeback of a file's dirty pages without waiting for it.
enum Writeback {
    static func start(_ fd: Int32) {
        #if os(Linux)
        // SYNC_FILE_RANGE_WRITE: queue the dirty pages for writing; returns without waiting.
        _ = linuxSyncFileRange(fd, 0, 0, 2)
        #endif
    }
}

#if os(Linux)
/// sync_file_range(2) (declared only under _GNU_SOURCE, which Swift's Glibc module lacks).
@_silgen_name("sync_file_range")
private func linuxSyncFileRange(_ fd: Int32, _ offset: Int64, _ count: Int64, _ flags: UInt32) -> Int32
#endif
