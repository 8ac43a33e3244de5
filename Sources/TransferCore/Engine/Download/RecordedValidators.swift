import CSystem
import Foundation

/// What a saved file was, recorded on the file itself (an extended
/// attribute, `user.transferd.v`) so a later `--skip-unchanged` can
/// ask the server "has it changed since?" (If-None-Match / If-Modified-Since)
/// instead of comparing sizes and dates. The record names the file's size and
/// modification time when it was written: a file changed since no longer
/// matches it, and is compared the old way or fetched again.
///
/// The record is kept small enough to sit inside an ext4 inode (60 bytes of
/// value beside this attribute's name, with 256-byte inodes): a larger one
/// takes a block of its own, which every saved file then allocated, journaled
/// and wrote (2.3% of the queue threads' CPU samples over 1,000 x 256 KiB,
/// and 4 KiB more to write per file). So the name is short, the URL digest
/// 64 bits, and a Last-Modified that the file's own time says is written `=`
/// (the download sets the file's time to it).
struct RecordedValidators: Equatable {
    static let attribute = "user.transferd.v"
    /// The name records had before 2026-12 (a 32-digit digest, Last-Modified spelled out): still read.
    static let formerAttribute = "user.transferd.validators"

    var etag: String?
    var lastModified: String?
    var size: Int64
    var modified: String
    /// Which URL the validators came from (a digest): another URL's are no answer for this one.
    var source: String

    /// Text for the attribute: five lines (size, mtime, URL digest, ETag, Last-Modified, or `=`
    /// when it is the mtime's second as an HTTP date). A Last-Modified of `=` itself, which is
    /// no date, is not kept: it would read back as one.
    var encoded: String {
        var shownModified = lastModified == "=" ? nil : lastModified
        if let value = shownModified, Self.seconds(of: modified).flatMap(HTTPDate.imfFixdate(seconds:)) == value {
            shownModified = "="
        }
        return [String(size), modified, source, etag ?? "", shownModified ?? ""].joined(separator: "\n")
    }

    /// The whole seconds of a `stamp`.
    private static func seconds(of stamp: String) -> Int64? {
        stamp.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false).first.flatMap { Int64($0) }
    }

    init(etag: String?, lastModified: String?, size: Int64, modified: String, source: String) {
        self.etag = etag
        self.lastModified = lastModified
        self.size = size
        self.modified = modified
        self.source = source
    }

    /// 64 bits of the URL's SHA-256 (a former record's 128 begin with them).
    static func digest(of url: URL) -> String { String(SHA256Hasher.hex(of: url.absoluteString).prefix(16)) }

    /// - Parameter shorthand: whether `=` stands for the mtime's date (records under `attribute`);
    ///   a former record's `=` is what the server sent.
    init?(encoded text: String, shorthand: Bool = true) {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard lines.count == 5, let size = Int64(lines[0]) else { return nil }
        self.size = size
        modified = lines[1]
        source = lines[2]
        etag = lines[3].isEmpty ? nil : lines[3]
        if lines[4] == "=" && shorthand {
            guard let seconds = Self.seconds(of: modified), let date = HTTPDate.imfFixdate(seconds: seconds) else { return nil }
            lastModified = date
        } else {
            lastModified = lines[4].isEmpty ? nil : lines[4]
        }
        // A header value is one line without control characters: anything else was not written here.
        for value in [etag, lastModified].compactMap({ $0 }) where HTTPHeaders.problem(name: "X", value: value) != nil {
            return nil
        }
        if etag == nil && lastModified == nil { return nil }
    }

    /// Whether the answer to the conditional HEAD (`conditionalHeaders`) says the remote is
    /// still the version recorded for a local file of `localSize` bytes. A pure decision:
    ///
    /// - 304: unchanged. Any other status but 2xx: not known to be unchanged.
    /// - A 2xx (a server that ignores the conditions) is compared: a `Content-Length` other
    ///   than the local size, or another ETag, is a change; the same strong ETag is the same
    ///   version; the same Last-Modified with the same size is the same version when neither
    ///   side has a strong ETag that says otherwise (a weak ETag only says "equivalent").
    func answerSaysUnchanged(status: Int, headers: HTTPHeaders, localSize: Int64) -> Bool {
        if status == 304 { return true }
        guard (200..<300).contains(status) else { return false }
        let length = headers["Content-Length"].flatMap(ResponseDecision.Answer.length)
        if let length, length != localSize { return false }
        let remote = ResponseValidators(headers: headers)
        if let recordedTag = etag, let remoteTag = remote.etag {
            let weak = recordedTag.hasPrefix("W/") || remoteTag.hasPrefix("W/")
            guard ResponseValidators.opaque(recordedTag) == ResponseValidators.opaque(remoteTag) else { return false }
            if !weak { return length != nil }
        }
        if let recordedDate = lastModified, let remoteDate = remote.lastModified {
            return length != nil && recordedDate == remoteDate
        }
        return false
    }

    /// The conditional headers that ask whether the remote changed since.
    var conditionalHeaders: HTTPHeaders {
        var headers = HTTPHeaders()
        if let etag { headers.set("If-None-Match", etag) }
        if let lastModified { headers.set("If-Modified-Since", lastModified) }
        return headers
    }

    static func stamp(_ info: stat) -> String { "\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)" }

    /// The record on the file at `path`, if the file is still what was
    /// recorded and it came from `url`.
    static func read(_ path: String, url: URL) -> RecordedValidators? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        var count = getxattr(path, attribute, &buffer, buffer.count)
        let former = count <= 0
        if former { count = getxattr(path, formerAttribute, &buffer, buffer.count) }
        guard count > 0,
              let record = RecordedValidators(encoded: String(decoding: buffer[0..<count], as: UTF8.self), shorthand: !former),
              record.size == Int64(info.st_size), record.modified == stamp(info),
              record.source.hasPrefix(digest(of: url)) else { return nil }
        return record
    }

    /// Records `validators` on the open file `fd` as it is now (best effort: a
    /// file system without user attributes just keeps no record).
    static func write(_ validators: ResponseValidators, url: URL, fd: Int32) {
        var info = stat()
        guard !validators.isEmpty, fstat(fd, &info) == 0 else { return }
        let record = RecordedValidators(etag: validators.etag, lastModified: validators.lastModified,
                                        size: Int64(info.st_size), modified: stamp(info), source: digest(of: url))
        let bytes = Array(record.encoded.utf8)
        _ = fsetxattr(fd, attribute, bytes, bytes.count, 0)
    }
}
