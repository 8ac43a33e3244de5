#if TRANSFERD_SLOW_DISK
import Foundation

/// Benchmark builds only (`-Xswiftc -DTRANSFERD_SLOW_DISK`): makes every write
/// to a partial file take as long as it would on a disk writing
/// `TRANSFERD_SLOW_DISK_MIBPS` MiB/s (default 100), to measure memory when the
/// disk is slower than the network. Never compiled into normal builds.
enum SlowDisk {
    static let bytesPerSecond: Double = {
        let mibps = ProcessInfo.processInfo.environment["TRANSFERD_SLOW_DISK_MIBPS"].flatMap(Double.init) ?? 100
        return mibps * 1_048_576
    }()

    static func throttle(bytes: Int) {
        usleep(UInt32(Double(bytes) / bytesPerSecond * 1_000_000))
    }
}
#endif
