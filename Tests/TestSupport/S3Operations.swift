import Foundation
import TransferCore

/// S3 operation names from what a client sent (method, path and query), so a
/// test can count operations against any S3 server, not only moto (whose
/// request log names them): SeaweedFS keeps no request log.
package enum S3Operation {
    /// The operation a path-style request is: `UploadPart`, `PutObject`,
    /// `ListObjectsV2`, ... (`Unknown` for anything else).
    package static func name(method: String, url: URL, headers: HTTPHeaders = [:]) -> String {
        let query = Set((URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems ?? []).map(\.name))
        // Path style: /bucket or /bucket/key...
        let segments = url.path.split(separator: "/", omittingEmptySubsequences: true)
        let onBucket = segments.count <= 1
        switch method {
        case "PUT":
            let copies = headers.contains("x-amz-copy-source")
            if query.contains("partNumber") { return copies ? "UploadPartCopy" : "UploadPart" }
            if copies { return "CopyObject" }
            if query.contains("tagging") { return "PutObjectTagging" }
            return onBucket ? "CreateBucket" : "PutObject"
        case "POST":
            if query.contains("uploads") { return "CreateMultipartUpload" }
            if query.contains("uploadId") { return "CompleteMultipartUpload" }
            if query.contains("delete") { return "DeleteObjects" }
            return "Unknown"
        case "DELETE":
            if query.contains("uploadId") { return "AbortMultipartUpload" }
            return onBucket ? "DeleteBucket" : "DeleteObject"
        case "GET":
            if query.contains("uploadId") { return "ListParts" }
            if query.contains("uploads") { return "ListMultipartUploads" }
            if onBucket { return query.contains("list-type") ? "ListObjectsV2" : "ListObjects" }
            return query.contains("tagging") ? "GetObjectTagging" : "GetObject"
        case "HEAD":
            return onBucket ? "HeadBucket" : "HeadObject"
        default:
            return "Unknown"
        }
    }

    /// The operations in a `--log-file` written by `transferd` (its request
    /// lines, `HH:MM:SS.mmm [backend #N] > METHOD URL`), in order.
    package static func fromLog(_ path: String) throws -> [String] {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        return text.split(separator: "\n").compactMap { line -> String? in
            // Request lines start with the clock; header lines with the tag.
            guard line.first?.isNumber == true, let marker = line.range(of: "] > ") else { return nil }
            let rest = line[marker.upperBound...].split(separator: " ", maxSplits: 1)
            guard rest.count == 2, let url = URL(string: String(rest[1])) else { return nil }
            return name(method: String(rest[0]), url: url)
        }
    }
}

/// Wraps a transport and records the S3 operation of every request it
/// executes (the client's side of a server's request log).
package final class RecordingTransport: Transport, Sendable {
    package let name: String
    package var capabilities: TransportCapabilities { wrapped.capabilities }
    private let wrapped: Transport
    private let log = LockedBox<[String]>([])

    package init(wrapping transport: Transport) {
        wrapped = transport
        name = transport.name
    }

    /// How many requests were recorded so far (a mark for `operations(since:)`).
    package var mark: Int { log.withLock { $0.count } }

    /// The operations recorded after `mark`.
    package func operations(since mark: Int = 0) -> [String] {
        log.withLock { Array($0[min(mark, $0.count)...]) }
    }

    package func execute(_ request: TransferRequest, sink: ResponseSink) async throws -> TransferOutcome {
        log.withLock { $0.append(S3Operation.name(method: request.method, url: request.url, headers: request.headers)) }
        return try await wrapped.execute(request, sink: sink)
    }
}
