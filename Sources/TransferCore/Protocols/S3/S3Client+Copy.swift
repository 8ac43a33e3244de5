import Foundation

/// An object as a copy needs it: its size, its ETag, and the headers a multipart
/// copy must send again itself (CopyObject keeps them on its own; a multipart
/// upload starts with none).
package struct S3ObjectHead: Sendable, Equatable {
    package var size: Int64
    package var etag: String
    /// Content-Type, Cache-Control, Content-Disposition, Content-Encoding,
    /// Content-Language, Expires, the storage class, server-side encryption and
    /// every `x-amz-meta-*`, as the server gave them.
    package var carried: HTTPHeaders

    /// The response headers a multipart copy sends again in CreateMultipartUpload.
    static let carriedNames: Set<String> = ["content-type", "cache-control", "content-disposition", "content-encoding",
                                            "content-language", "expires", "x-amz-storage-class",
                                            "x-amz-website-redirect-location", "x-amz-server-side-encryption",
                                            "x-amz-server-side-encryption-aws-kms-key-id"]

    /// Encrypted with SSE-KMS (or DSSE-KMS) or SSE-C: the ETag is 32 hex digits that are no MD5 of the bytes.
    package var encrypted: Bool
    /// How many tags the object has (`x-amz-tagging-count`): a copy in parts asks for them
    /// (`S3Client.objectTagging`) and sends them again, as CopyObject carries them by itself.
    package var tagCount = 0

    package init(size: Int64, etag: String, carried: HTTPHeaders = [:], encrypted: Bool = false) {
        self.size = size
        self.etag = etag
        self.carried = carried
        self.encrypted = encrypted
    }

    /// The object a HEAD answer describes, or why it cannot be trusted: without a size (or with one
    /// no S3 object has) or an ETag, no copy of it could be checked.
    init(headers: HTTPHeaders, object: String) throws {
        guard let size = headers["Content-Length"].flatMap(Int64.init), size >= 0, size <= S3CopyPlan.largestObject else {
            throw S3Error.verification("HeadObject of \(object) gave no size S3 could hold (Content-Length: "
                                       + "\(headers["Content-Length"].map(HTTPHeaders.visible) ?? "none")); check that the endpoint is an S3 server")
        }
        guard let etag = headers["ETag"], !etag.isEmpty else {
            throw S3Error.verification("HeadObject of \(object) gave no ETag: no copy of it could be checked; check that the endpoint is an S3 server")
        }
        self.size = size
        self.etag = etag
        carried = HTTPHeaders()
        for (name, value) in headers {
            let lower = name.lowercased()
            if Self.carriedNames.contains(lower) || lower.hasPrefix("x-amz-meta-") { carried.add(name, value) }
        }
        encrypted = headers["x-amz-server-side-encryption"].map { $0.lowercased().hasPrefix("aws:kms") } == true
            || headers.contains("x-amz-server-side-encryption-customer-algorithm")
        tagCount = Self.tagCount(headers)
    }

    /// `x-amz-tagging-count` (0 when absent or not a count).
    static func tagCount(_ headers: HTTPHeaders) -> Int {
        headers["x-amz-tagging-count"].flatMap { Int(HTTPHeaders.trimmed(Substring($0))) }.map { max(0, $0) } ?? 0
    }
}

/// One object tag (S3 allows ten an object).
package struct S3Tag: Sendable, Equatable {
    package var key: String
    package var value: String
    package init(key: String, value: String) {
        self.key = key
        self.value = value
    }

    /// The tags as `x-amz-tagging` takes them: URL query form, each key and value percent-encoded.
    static func header(_ tags: [S3Tag]) -> String {
        tags.map { AWSEncoding.encode($0.key) + "=" + AWSEncoding.encode($0.value) }.joined(separator: "&")
    }

    /// The tags of a GetObjectTagging answer (`<Tagging><TagSet><Tag><Key/><Value/></Tag>…`).
    static func parse(_ body: String) -> [S3Tag]? {
        guard let root = S3XMLElement.parse(body), root.name == "Tagging" else { return nil }
        return root.child("TagSet")?.children("Tag").compactMap { tag in
            guard let key = tag.child("Key")?.text else { return nil }
            return S3Tag(key: key, value: tag.child("Value")?.text ?? "")
        } ?? []
    }
}

extension S3Client {
    /// The object's size, ETag and carried headers, or nil when there is none (404). Throws when the
    /// answer lacks a size or an ETag (`S3ObjectHead.init(headers:object:)`).
    package func headForCopy(bucket: String, key: String) async throws -> S3ObjectHead? {
        let response = try await send("HeadObject", method: "HEAD", bucket: bucket, key: key, accept: [200, 404])
        guard response.status == 200 else { return nil }
        return try S3ObjectHead(headers: response.headers, object: "s3://\(bucket)/\(key)")
    }

    /// The length of part `number` of an object sent in parts (`HEAD ?partNumber=N`), or nil
    /// when the server does not say.
    package func partLength(bucket: String, key: String, number: Int) async throws -> Int64? {
        let response = try await send("HeadObject", method: "HEAD", bucket: bucket, key: key, query: "partNumber=\(number)",
                                      accept: Set(200..<500))
        guard response.status == 200 || response.status == 206 else { return nil }
        if let range = response.headers["Content-Range"].flatMap(ContentRange.init(header:)) { return range.last - range.first + 1 }
        return response.headers["Content-Length"].flatMap(Int64.init)
    }

    /// `x-amz-copy-source`: the source's bucket and key, percent-encoded with the slashes kept.
    static func copySource(bucket: String, key: String) -> String {
        "/" + AWSEncoding.encode(bucket) + "/" + AWSEncoding.encode(key, keepSlash: true)
    }

    /// A whole object copied on the server (up to 5 GiB), with its metadata (`COPY`,
    /// S3's default). `ifMatch`: the source's ETag when the copy began; a server that
    /// honours `x-amz-copy-source-if-match` refuses the copy of another version (412).
    /// Returns the copy's ETag.
    package func copyObject(from source: S3Location, ifMatch: String, toBucket bucket: String, key: String) async throws -> String {
        let headers: HTTPHeaders = ["x-amz-copy-source": Self.copySource(bucket: source.bucket, key: source.key),
                                    "x-amz-copy-source-if-match": ifMatch,
                                    "x-amz-metadata-directive": "COPY"]
        let result = try await sendForResult("CopyObject", method: "PUT", bucket: bucket, key: key, headers: headers,
                                             root: "CopyObjectResult")
        guard let etag = result.value("ETag"), !etag.isEmpty else {
            throw S3Error.verification("CopyObject of s3://\(source.bucket)/\(source.key) to s3://\(bucket)/\(key) answered without the copy's ETag; "
                                       + "check that the endpoint is an S3 server")
        }
        return etag
    }

    /// Bytes `offset..<offset+length` of the source copied on the server into part `number`
    /// of a multipart upload; returns the part's ETag.
    package func uploadPartCopy(from source: S3Location, ifMatch: String, offset: Int64, length: Int64,
                               toBucket bucket: String, key: String, uploadID: String, number: Int) async throws -> String {
        let headers: HTTPHeaders = ["x-amz-copy-source": Self.copySource(bucket: source.bucket, key: source.key),
                                    "x-amz-copy-source-if-match": ifMatch,
                                    "x-amz-copy-source-range": "bytes=\(offset)-\(offset + length - 1)"]
        let result = try await sendForResult("UploadPartCopy", method: "PUT", bucket: bucket, key: key,
                                             query: "partNumber=\(number)&uploadId=\(AWSEncoding.encode(uploadID))",
                                             headers: headers, root: "CopyPartResult")
        guard let etag = result.value("ETag"), !etag.isEmpty else {
            throw S3Error.verification("UploadPartCopy \(number) of s3://\(source.bucket)/\(source.key) to s3://\(bucket)/\(key) answered "
                                       + "without the part's ETag; check that the endpoint is an S3 server")
        }
        return etag
    }

    /// The object's tags (GetObjectTagging).
    package func objectTagging(bucket: String, key: String) async throws -> [S3Tag] {
        let response = try await send("GetObjectTagging", method: "GET", bucket: bucket, key: key, query: "tagging=")
        guard let tags = S3Tag.parse(response.body) else {
            throw S3Error.verification("GetObjectTagging of s3://\(bucket)/\(key) answered without a Tagging document; "
                                       + "check that the endpoint is an S3 server")
        }
        return tags
    }

    /// Starts a multipart upload with the given headers (a copy's carried ones); returns its id.
    package func createMultipartUpload(bucket: String, key: String, headers: HTTPHeaders) async throws -> String {
        // Not repeated after a connection failure, for the reason `createMultipartUpload(bucket:key:contentType:)` gives.
        let response = try await send("CreateMultipartUpload", method: "POST", bucket: bucket, key: key, query: "uploads=",
                                      headers: headers, repeatAfterConnectionFailure: false)
        guard let id = S3XMLElement.parse(response.body)?.value("UploadId"), !id.isEmpty else {
            throw S3Error.verification("CreateMultipartUpload answered without an UploadId")
        }
        return id
    }

    /// An operation whose 200 carries a result document: S3 may answer 200 with an error
    /// document once the body has started (CompleteMultipartUpload, CopyObject, UploadPartCopy);
    /// AWS says to send the request again when its code is a passing one. The result's root
    /// must be named `root` (or start with it: moto writes `...Response` for some).
    func sendForResult(_ operation: String, method: String, bucket: String, key: String, query: String = "",
                       headers: HTTPHeaders, body: RequestBody = .none, root: String) async throws -> S3XMLElement {
        var attempt = 0
        while true {
            attempt += 1
            let response = try await send(operation, method: method, bucket: bucket, key: key, query: query,
                                          headers: headers, body: body)
            if let error = S3ErrorDocument(response.body) {
                guard case .retry(let delay) = retry.decide(.s3(status: 200, code: error.code, retryAfter: nil), attempt: attempt) else {
                    throw S3Error.service(status: 200, code: error.code, message: error.message,
                                          operation: operation, endpoint: Redaction.url(configuration.endpoint))
                }
                if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
                continue
            }
            guard let result = S3XMLElement.parse(response.body), result.name.hasPrefix(root) else {
                throw S3Error.verification("\(operation) answered without a \(root) document: "
                                           + HTTPHeaders.visible(String(response.body.prefix(300))))
            }
            return result
        }
    }
}
