import CSystem
import Foundation

/// Copies the start of one open file into another, in the kernel: a takeover's fresh
/// partial file (`PartFile.replaced`) gets what the file it replaces holds this way.
enum FileCopy {
    /// How the bytes were copied.
    enum Method: String, Equatable {
        /// FICLONE: the new file shares the old one's blocks (btrfs, XFS), no data moves.
        case clone
        /// copy_file_range(2): copied in the kernel, through the page cache (ext4, tmpfs).
        case copyRange = "copy_file_range"
        /// pread and pwrite, where neither of those works (another kind of file system).
        case readWrite = "read/write"
    }

    /// Copies the first `length` bytes of `source` into `destination` (empty, open for
    /// writing), leaving `destination` exactly `length` bytes long.
    /// - Throws: the `POSIXFailure` of the step that failed, naming `path` (the new file).
    static func copy(from source: Int32, to destination: Int32, length: Int64, path: String) throws -> Method {
        #if os(Linux)
        if transferd_clone_file(destination, source) == 0 {
            guard ftruncate(destination, off_t(length)) == 0 else { throw POSIXFailure(operation: "truncate", path: path) }
            return .clone
        }
        var inOffset: Int64 = 0, outOffset: Int64 = 0
        var copied = true
        while inOffset < length {
            let count = withUnsafeMutablePointer(to: &inOffset) { input in
                withUnsafeMutablePointer(to: &outOffset) { output in
                    transferd_copy_file_range(source, input, destination, output, Int(min(length - input.pointee, 1 << 30)))
                }
            }
            if count > 0 { continue }
            if count < 0 && errno == EINTR { continue }
            // Not supported between these files (EXDEV, EINVAL, ENOSYS, an old kernel), or the
            // source ended early: the rest by hand, from where it stopped.
            copied = false
            break
        }
        if copied {
            guard ftruncate(destination, off_t(length)) == 0 else { throw POSIXFailure(operation: "truncate", path: path) }
            return .copyRange
        }
        try readWrite(from: source, to: destination, offset: inOffset, length: length, path: path)
        return .readWrite
        #else
        try readWrite(from: source, to: destination, offset: 0, length: length, path: path)
        return .readWrite
        #endif
    }

    private static func readWrite(from source: Int32, to destination: Int32, offset start: Int64, length: Int64,
                                  path: String) throws {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var offset = start
        while offset < length {
            let wanted = Int(min(Int64(buffer.count), length - offset))
            let read = buffer.withUnsafeMutableBytes { pread(source, $0.baseAddress, wanted, off_t(offset)) }
            if read < 0 && errno == EINTR { continue }
            guard read >= 0 else { throw POSIXFailure(operation: "read", path: path) }
            if read == 0 { break } // the source is shorter: the rest stays a hole, as it was there
            var written = 0
            while written < read {
                let count = buffer.withUnsafeBytes { pwrite(destination, $0.baseAddress! + written, read - written, off_t(offset) + off_t(written)) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { throw POSIXFailure(operation: "write", path: path) }
                written += count
            }
            offset += Int64(read)
        }
        guard ftruncate(destination, off_t(length)) == 0 else { throw POSIXFailure(operation: "truncate", path: path) }
    }
}
