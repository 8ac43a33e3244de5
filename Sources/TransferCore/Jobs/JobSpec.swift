import Foundation

/// One job as the user described it, validated. Secrets stay as `${env:NAME}`
/// references here and in the store; they are expanded only when the job runs.
public struct JobSpec: Codable, Equatable, Sendable {
    public enum Kind: String, Codable, Sendable, CaseIterable {
        /// HTTP(S) download to a file.
        case download
        /// Streamed PUT (or POST) of one file's bytes.
        case put
        /// Streamed multipart/form-data POST of fields and files.
        case form
        /// S3 multipart upload of a file or a directory.
        case s3Upload = "s3-upload"
        /// A copy made by the S3 server, of an object or a prefix, to another key or prefix on the same endpoint.
        case s3Copy = "s3-copy"
        /// Resumable upload of one file to a tus 1.0 server (`url`: its creation URL).
        case tus
        /// Resumable upload of one file by the IETF draft "Resumable Uploads for HTTP"
        /// (`url`: the resource that takes the upload).
        case resumable
    }

    /// One file part of a multipart/form-data upload.
    public struct FormFile: Codable, Equatable, Sendable {
        public var field: String
        public var path: String
        public var filename: String?
        public var contentType: String?
    }

    public var id: String
    public var kind: Kind
    public var url: String
    /// Download: where the file goes (absolute, inside the root). Uploads: unused.
    public var destination: String?
    /// Uploads: the local file (or directory for S3). An S3 copy: the s3:// object or prefix copied.
    public var source: String?
    public var headers: [String: String]
    public var priority: Int
    public var transport: String?
    public var connections: Int?
    public var sha256: String?
    /// `checksums`: a SHA256SUMS list (http or https) whose line for the file gives its SHA-256,
    /// and `checksums_name`, the name it is listed under (default: the URL's file name).
    public var checksums: String?
    public var checksumsName: String?
    /// `mirrors`: other http(s) URLs of the same file (`DownloadOptions.mirrors`), and
    /// `connections_per_mirror`, what one of them may take at once.
    public var mirrors: [String]?
    public var connectionsPerMirror: Int?
    /// A download from a metalink: the size it states, and its piece hashes (`PieceHashes.encoded`).
    public var size: Int64?
    public var pieces: String?
    public var overwrite: OverwritePolicy?
    public var retries: Int?
    public var limitRate: Int64?
    /// `speed_limit`: the download's floor in bytes per second (0: none); see `LowSpeedLimit`.
    public var speedLimit: Int64?
    /// `speed_time`: how many seconds a download may stay under its floor.
    public var speedTime: Int64?
    /// An S3 prefix download: globs over the key below the prefix.
    public var include: [String]?
    public var exclude: [String]?
    /// An S3 upload: send nothing the bucket already holds.
    public var skipUnchanged: Bool?
    /// A folder or prefix job made a sync: `delete` what the destination holds and the source does
    /// not, once everything is copied, at most `max_delete` percent of it (default 50) unless `force`.
    public var delete: Bool?
    public var maxDelete: Int?
    public var force: Bool?

    /// The job's `delete`, `max_delete` and `force` as the bulk engines take them.
    package var syncOptions: SyncOptions {
        SyncOptions(delete: delete ?? false, maxDeleteShare: Double(maxDelete ?? 50) / 100, force: force ?? false)
    }
    /// Commands (argv, no shell) run when the job ends done or failed, and a URL told
    /// of its outcome: the job's own, else the run's (`--on-done`, `--on-failed`, `--notify`).
    public var onDone: [String]?
    public var onFailed: [String]?
    public var notify: String?
    // Uploads (executed from the upload engine onward).
    public var method: String?
    public var contentType: String?
    public var fields: [String: String]?
    public var files: [FormFile]?
    public var partSize: Int64?
    public var partsInFlight: Int?
    /// A tus upload: bytes per PATCH (`chunk_size`).
    public var chunkSize: Int64?
    public var region: String?
    public var endpoint: String?
    public var profile: String?
    /// An `s3-copy` from an S3 object on another endpoint (or with other credentials):
    /// `source_endpoint`, `source_region`, `source_profile`. The copy is then streamed.
    public var sourceEndpoint: String?
    public var sourceRegion: String?
    public var sourceProfile: String?

    public init(id: String, kind: Kind, url: String, destination: String? = nil, source: String? = nil,
                headers: [String: String] = [:], priority: Int = 0) {
        self.id = id
        self.kind = kind
        self.url = url
        self.destination = destination
        self.source = source
        self.headers = headers
        self.priority = priority
    }

    /// The host jobs are grouped by for the per-host connection limit.
    public var host: String { Self.host(of: url) }

    /// The host part of a URL, read from the text (the queue asks once per job;
    /// validation has already parsed the URL): after `scheme://` and any user
    /// info, before the port and path; an IPv6 address without its brackets.
    static func host(of url: String) -> String {
        let bytes = Array(url.utf8)
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), bytes.count > colon + 2,
              bytes[colon + 1] == UInt8(ascii: "/"), bytes[colon + 2] == UInt8(ascii: "/") else { return "" }
        let start = colon + 3
        let end = bytes[start...].firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") } ?? bytes.count
        var authority = bytes[start..<end]
        if let at = authority.lastIndex(of: UInt8(ascii: "@")) { authority = authority[(at + 1)...] }
        if authority.first == UInt8(ascii: "["), let close = authority.firstIndex(of: UInt8(ascii: "]")) {
            return String(decoding: authority[(authority.startIndex + 1)..<close], as: UTF8.self)
        }
        if let port = authority.firstIndex(of: UInt8(ascii: ":")) { authority = authority[..<port] }
        return String(decoding: authority, as: UTF8.self)
    }
}
