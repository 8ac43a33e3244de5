import CSystem
import Foundation

/// What a saved file was, recorded on the file itself (an extended
/// attribute, `user.transferd.validators`) so a later `--skip-unchanged` can
/// ask the server "has it changed since?" (If-None-Match / If-Modified-Since)
/// instead of comparing sizes and dates. The record names the file's size and
/// modification time when it was written: a file changed since no longer
/// matches it, and is compared the old way or fetched again.
struct RecordedValidators: Equatable {
    static let attribute = "user.transferd.validators"

    var etag: String?
    var lastModified: String?
    var size: Int64
    var modified: String

    /// Text for the attribute: four lines (size, mtime, ETag, Last-Modified).
    var encoded: String {
        [String(size), modified, etag ?? "", lastModified ?? ""].joined(separator: "\n")
    }

    init(etag: String?, lastModified: String?, size: Int64, modified: String) {
        self.etag = etag
        self.lastModified = lastModified
        self.size = size
        self.modified = modified
    }

    init?(encoded text: String) {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard lines.count == 4, let size = Int64(lines[0]) else { return nil }
        self.size = size
        modified = lines[1]
        etag = lines[2].isEmpty ? nil : lines[2]
        lastModified = lines[3].isEmpty ? nil : lines[3]
        // A header value is one line without control characters: anything else was not written here.
        for value in [etag, lastModified].compactMap({ $0 }) where HTTPHeaders.problem(name: "X", value: value) != nil {
            return nil
        }
        if etag == nil && lastModified == nil { return nil }
    }

    /// The conditional headers that ask whether the remote changed since.
    var conditionalHeaders: HTTPHeaders {
        var headers = HTTPHeaders()
        if let etag { headers.set("If-None-Match", etag) }
        if let lastModified { headers.set("If-Modified-Since", lastModified) }
        return headers
    }

    static func stamp(_ info: stat) -> String { "\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)" }

    /// The record on the file at `path`, if the file is still what was recorded.
    static func read(_ path: String) -> RecordedValidators? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = getxattr(path, attribute, &buffer, buffer.count)
        guard count > 0, let record = RecordedValidators(encoded: String(decoding: buffer[0..<count], as: UTF8.self)),
              record.size == Int64(info.st_size), record.modified == stamp(info) else { return nil }
        return record
    }

    /// Records `validators` on the open file `fd` as it is now (best effort: a
    /// file system without user attributes just keeps no record).
    static func write(_ validators: ResponseValidators, fd: Int32) {
        var info = stat()
        guard !validators.isEmpty, fstat(fd, &info) == 0 else { return }
        let record = RecordedValidators(etag: validators.etag, lastModified: validators.lastModified,
                                        size: Int64(info.st_size), modified: stamp(info))
        let bytes = Array(record.encoded.utf8)
        _ = fsetxattr(fd, attribute, bytes, bytes.count, 0)
    }
}
