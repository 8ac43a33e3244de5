import Foundation

/// A multipart/form-data body (RFC 7578) composed on the fly: small
/// preambles in memory between whole files read from disk as they are sent,
/// so a 10 GiB file uploads in constant memory with an exact Content-Length.
public struct MultipartForm: Sendable {
    public struct File: Sendable, Equatable {
        public var field: String
        public var path: String
        /// The name sent to the server (default: the file's own name).
        public var filename: String?
        /// Default: from the file name's extension (`MIMEType.guess`).
        public var contentType: String?

        public init(field: String, path: String, filename: String? = nil, contentType: String? = nil) {
            self.field = field
            self.path = path
            self.filename = filename
            self.contentType = contentType
        }
    }

    public let fields: [(name: String, value: String)]
    public let files: [File]
    public let boundary: String

    /// - Parameter boundary: fixed for tests; by default 32 random hex digits,
    ///   re-drawn if a text field happens to contain it.
    public init(fields: [(name: String, value: String)], files: [File], boundary: String? = nil) {
        self.fields = fields
        self.files = files
        var chosen = boundary ?? Self.randomBoundary()
        while boundary == nil && fields.contains(where: { $0.value.contains(chosen) || $0.name.contains(chosen) }) {
            chosen = Self.randomBoundary()
        }
        self.boundary = chosen
    }

    public var contentType: String { "multipart/form-data; boundary=\(boundary)" }

    static func randomBoundary() -> String {
        "transferd-" + (0..<16).map { _ in UInt8.random(in: 0...255) }.hexString
    }

    /// The body: fields first, then files, each file streamed from disk.
    package func body() throws -> RequestBody {
        var parts: [BodyPart] = []
        var text = ""
        for field in fields {
            text += "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(Self.quote(field.name))\"\r\n\r\n\(field.value)\r\n"
        }
        for file in files {
            var info = stat()
            guard stat(file.path, &info) == 0 else { throw POSIXFailure(operation: "read", path: file.path) }
            guard (info.st_mode & S_IFMT) == S_IFREG else {
                throw POSIXFailure(operation: "upload (not a regular file)", path: file.path, code: EISDIR)
            }
            let name = file.filename ?? (file.path as NSString).lastPathComponent
            let type = file.contentType ?? MIMEType.guess(forPath: name)
            text += "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(Self.quote(file.field))\"; "
                + "filename=\"\(Self.quote(name))\"\r\nContent-Type: \(type)\r\n\r\n"
            parts.append(.data(Data(text.utf8)))
            text = ""
            parts.append(.file(path: file.path, offset: 0, length: Int64(info.st_size)))
            text += "\r\n"
        }
        text += "--\(boundary)--\r\n"
        parts.append(.data(Data(text.utf8)))
        return .composed(parts)
    }

    /// A quoted-string for Content-Disposition: `\` and `"` escaped with a
    /// backslash, CR and LF percent-encoded (never raw), other characters
    /// (non-ASCII included) as UTF-8.
    static func quote(_ text: String) -> String {
        var result = ""
        for character in text {
            switch character {
            case "\\": result += "\\\\"
            case "\"": result += "\\\""
            case "\r": result += "%0D"
            case "\n": result += "%0A"
            case "\r\n": result += "%0D%0A"
            default: result.append(character)
            }
        }
        return result
    }
}

/// Content types by file extension, for upload parts without an explicit type.
package enum MIMEType {
    static let byExtension: [String: String] = [
        "txt": "text/plain", "csv": "text/csv", "html": "text/html", "htm": "text/html", "css": "text/css",
        "js": "text/javascript", "json": "application/json", "xml": "application/xml", "pdf": "application/pdf",
        "zip": "application/zip", "gz": "application/gzip", "tgz": "application/gzip", "tar": "application/x-tar",
        "bz2": "application/x-bzip2", "xz": "application/x-xz", "zst": "application/zstd", "7z": "application/x-7z-compressed",
        "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp",
        "svg": "image/svg+xml", "ico": "image/x-icon", "mp3": "audio/mpeg", "wav": "audio/wav", "ogg": "audio/ogg",
        "mp4": "video/mp4", "webm": "video/webm", "mov": "video/quicktime", "iso": "application/x-iso9660-image",
        "md": "text/markdown", "yaml": "application/yaml", "yml": "application/yaml", "wasm": "application/wasm",
    ]

    package static func guess(forPath path: String) -> String {
        let ext = (path as NSString).pathExtension.lowercased()
        return byExtension[ext] ?? "application/octet-stream"
    }
}
