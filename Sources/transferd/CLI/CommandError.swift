import Foundation
import TransferCore

/// What a command prints for the error that ended it, one kind of sentence for one cause
/// everywhere (its exit code: `ExitCode.of`).
enum CommandError {
    /// The error as a sentence. transferd's own errors say what, where and the fix;
    /// Foundation's (an NSError: a file that could not be written, say) are put in the same
    /// shape, never shown raw.
    static func text(_ error: Error) -> String {
        let bridged = error as NSError
        guard bridged.domain == NSCocoaErrorDomain || bridged.domain == NSPOSIXErrorDomain else { return "\(error)" }
        let path = (bridged.userInfo[NSFilePathErrorKey] as? String) ?? (bridged.userInfo[NSURLErrorKey] as? URL)?.path
        // The cause, from the system: on Linux the underlying error is a Swift error, not bridged by `as? NSError`.
        let underlying = (bridged.userInfo[NSUnderlyingErrorKey] as? Error).map { $0 as NSError }
        let posix = bridged.domain == NSPOSIXErrorDomain ? bridged : underlying.flatMap { $0.domain == NSPOSIXErrorDomain ? $0 : nil }
        let reason = posix.map { String(cString: strerror(Int32($0.code))) } ?? "Foundation error \(bridged.code)"
        // Cocoa's file error codes: 256-511 reading, 512-767 writing.
        let verb = bridged.domain == NSCocoaErrorDomain && (512..<768).contains(bridged.code) ? "cannot write"
            : bridged.domain == NSCocoaErrorDomain && (256..<512).contains(bridged.code) ? "cannot read" : "cannot use"
        guard let path else { return "\(verb) a file (\(reason)) — check the folders named in the command" }
        let folder = (path as NSString).deletingLastPathComponent
        return "\(verb) \(path) (\(reason)) — check that \(folder) is a folder this user may write in, and that \(path) is not a folder"
    }
}
