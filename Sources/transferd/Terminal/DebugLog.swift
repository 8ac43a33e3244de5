import Foundation

/// The `--log-file` of a command: lines appended to a file, whole lines at a
/// time (transport threads write concurrently).
// The file handle is written only under `lock`, a whole line at a time.
final class DebugLogFile: Sendable {
    private let fd: Int32
    private let lock = NSLock()

    init(path: String) throws {
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw UsageError("--log-file \(path): cannot open it for writing (\(String(cString: strerror(errno))))") }
    }

    deinit { close(fd) }

    func write(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        lock.lock()
        defer { lock.unlock() }
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Foundation.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if written <= 0 { return }
            offset += written
        }
    }
}
