import Foundation

/// A failed system call on a local file, with the path and errno's text.
public struct POSIXFailure: Error, CustomStringConvertible, Sendable {
    public let operation: String
    public let path: String
    public let code: Int32

    package init(operation: String, path: String, code: Int32 = errno) {
        self.operation = operation
        self.path = path
        self.code = code
    }

    /// True when the disk (or quota) is full: the user must free space.
    public var isDiskFull: Bool { code == ENOSPC || code == EDQUOT }

    /// True when the process (or the system) has as many files open as it may.
    var isOutOfDescriptors: Bool { code == EMFILE || code == ENFILE }

    public var description: String {
        let reason = String(cString: strerror(code))
        if isDiskFull {
            return "\(operation) \(path): \(reason) — free some space and run the same command again; the partial file is kept"
        }
        return "\(operation) \(path): \(reason)"
    }
}
