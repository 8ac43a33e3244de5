import Foundation

/// The S3 operations transferd uses, each one signed request with retries
/// (network errors, 5xx including 503 SlowDown, 429) by the retry policy.
package final class S3Client: Sendable {
    package let configuration: S3Configuration
    package let transport: Transport
    package let retry: RetryPolicy
    package let tls: TLSOptions
    /// A signer with the credentials to use now (asked of the provider at each signing,
    /// which fetches new temporary credentials before the held ones expire).
    func signer() throws -> SigV4Signer {
        SigV4Signer(credentials: try configuration.credentialsProvider.credentials(), region: configuration.region)
    }

    package init(configuration: S3Configuration, transport: Transport, retry: RetryPolicy = .default, tls: TLSOptions = TLSOptions()) {
        self.configuration = configuration
        self.transport = transport
        self.retry = retry
        self.tls = tls
    }

    package struct Response: Sendable {
        package var status: Int
        package var headers: HTTPHeaders
        package var body: String
    }

    // MARK: Operations

    /// Starts a multipart upload; with `crc32`, every part must carry its CRC-32
    /// (S3 checks each, and keeps a composite checksum of the object).
    package func createMultipartUpload(bucket: String, key: String, contentType: String, crc32: Bool = true) async throws -> String {
        var headers: HTTPHeaders = ["Content-Type": contentType]
        if crc32 { headers.add("x-amz-checksum-algorithm", "CRC32") }
        // Not repeated after a connection failure: the first request may have created an upload whose
        // id never arrived, and a second would leave it open. The caller's attempt fails instead; its
        // record of the intent (made before this call) has the next attempt abort what is open for the key.
        let response = try await send("CreateMultipartUpload", method: "POST", bucket: bucket, key: key, query: "uploads=",
                                      headers: headers, repeatAfterConnectionFailure: false)
        guard let id = S3XMLElement.parse(response.body)?.value("UploadId"), !id.isEmpty else {
            throw S3Error.verification("CreateMultipartUpload answered without an UploadId")
        }
        return id
    }

    /// Sends one part with its Content-MD5 and, when given, its CRC-32 (S3
    /// checks both) and returns the ETag and the CRC-32 the server computed.
    package func uploadPart(bucket: String, key: String, uploadID: String, number: Int, path: String, offset: Int64,
                           length: Int64, md5: [UInt8], crc32: String? = nil, rate: SendRate = SendRate(), inFlight: Int = 1,
                           onProgress: (@Sendable (Int64) -> Void)? = nil) async throws -> (etag: String, crc32: String?) {
        let query = "partNumber=\(number)&uploadId=\(AWSEncoding.encode(uploadID))"
        var headers: HTTPHeaders = ["Content-MD5": Data(md5).base64EncodedString()]
        if let crc32 { headers.add("x-amz-checksum-crc32", crc32) }
        let response = try await send("UploadPart", method: "PUT", bucket: bucket, key: key, query: query,
                                      headers: headers,
                                      body: .file(path: path, offset: offset, length: length), rate: rate, inFlight: inFlight,
                                      onProgress: onProgress)
        guard let etag = response.headers["ETag"] else { throw S3Error.verification("UploadPart \(number) answered without an ETag") }
        return (etag, response.headers["x-amz-checksum-crc32"])
    }

    package struct ListedPart: Sendable, Equatable {
        package var number: Int
        package var etag: String
        package var size: Int64
    }

    /// Every part the server holds for the upload (follows pagination).
    package func listParts(bucket: String, key: String, uploadID: String) async throws -> [ListedPart] {
        var parts: [ListedPart] = []
        var marker = 0
        while true {
            var query = "max-parts=1000&uploadId=\(AWSEncoding.encode(uploadID))"
            if marker > 0 { query += "&part-number-marker=\(marker)" }
            let response = try await send("ListParts", method: "GET", bucket: bucket, key: key, query: query)
            guard let result = S3XMLElement.parse(response.body), result.name.hasPrefix("ListParts") else {
                throw S3Error.verification("ListParts answered with something that is not a ListParts document: "
                                           + HTTPHeaders.visible(String(response.body.prefix(300))))
            }
            for part in result.children("Part") {
                guard let number = part.value("PartNumber").flatMap(Int.init), let etag = part.value("ETag"),
                      let size = part.value("Size").flatMap(Int64.init) else { continue }
                parts.append(ListedPart(number: number, etag: etag, size: size))
            }
            guard result.value("IsTruncated") == "true",
                  let next = result.value("NextPartNumberMarker").flatMap(Int.init), next > marker else {
                return parts
            }
            marker = next
        }
    }

    /// Joins the parts; returns the object's ETag.
    package func completeMultipartUpload(bucket: String, key: String, uploadID: String,
                                        parts: [(number: Int, etag: String, crc32: String?)]) async throws -> String {
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for part in parts.sorted(by: { $0.number < $1.number }) {
            xml += "<Part><PartNumber>\(part.number)</PartNumber><ETag>\(XMLText.escape(part.etag))</ETag>"
            if let crc32 = part.crc32 { xml += "<ChecksumCRC32>\(XMLText.escape(crc32))</ChecksumCRC32>" }
            xml += "</Part>"
        }
        xml += "</CompleteMultipartUpload>"
        // AWS names the root CompleteMultipartUploadResult; moto writes CompleteMultipartUploadResponse.
        let result = try await sendForResult("CompleteMultipartUpload", method: "POST", bucket: bucket, key: key,
                                             query: "uploadId=\(AWSEncoding.encode(uploadID))",
                                             headers: ["Content-Type": "application/xml"], body: .data(Data(xml.utf8)),
                                             root: "CompleteMultipartUpload")
        guard let etag = result.value("ETag") else {
            throw S3Error.verification("CompleteMultipartUpload answered without the object's ETag")
        }
        return etag
    }

    package func abortMultipartUpload(bucket: String, key: String, uploadID: String) async throws {
        _ = try await send("AbortMultipartUpload", method: "DELETE", bucket: bucket, key: key,
                           query: "uploadId=\(AWSEncoding.encode(uploadID))", accept: [204, 200, 404])
    }

    /// A whole file in one PUT, with Content-MD5; returns the ETag.
    package func putObject(bucket: String, key: String, path: String, length: Int64, md5: [UInt8], contentType: String,
                          rate: SendRate = SendRate(), onProgress: (@Sendable (Int64) -> Void)? = nil) async throws -> String {
        let response = try await send("PutObject", method: "PUT", bucket: bucket, key: key,
                                      headers: ["Content-MD5": Data(md5).base64EncodedString(), "Content-Type": contentType],
                                      body: .file(path: path, offset: 0, length: length), rate: rate, onProgress: onProgress)
        return response.headers["ETag"] ?? ""
    }

    /// Size and ETag of an object.
    package func headObject(bucket: String, key: String) async throws -> (size: Int64, etag: String) {
        let response = try await send("HeadObject", method: "HEAD", bucket: bucket, key: key)
        return (response.headers["Content-Length"].flatMap(Int64.init) ?? -1, response.headers["ETag"] ?? "")
    }

    /// Size and ETag of an object, or nil when there is none (404).
    package func headObjectIfPresent(bucket: String, key: String) async throws -> (size: Int64, etag: String)? {
        let response = try await send("HeadObject", method: "HEAD", bucket: bucket, key: key, accept: [200, 404])
        guard response.status == 200 else { return nil }
        return (response.headers["Content-Length"].flatMap(Int64.init) ?? -1, response.headers["ETag"] ?? "")
    }

    /// The size of an object's first part (`HEAD ?partNumber=1`), for an object sent in parts;
    /// nil when the server does not say (a single-part object, or no part support).
    package func firstPartSize(bucket: String, key: String) async throws -> Int64? {
        // Any answer but a 5xx (retried first) is taken: a server without part support may say 400, 403, 404, 416 or 501.
        let response = try await send("HeadObject", method: "HEAD", bucket: bucket, key: key, query: "partNumber=1",
                                      accept: Set(200..<500).union([501]))
        guard response.status == 206 || response.status == 200,
              let count = response.headers["x-amz-mp-parts-count"].flatMap(Int.init), count > 1 else { return nil }
        if let range = response.headers["Content-Range"].flatMap(ContentRange.init(header:)), range.first == 0 {
            return range.last + 1
        }
        return response.headers["Content-Length"].flatMap(Int64.init)
    }

    package func createBucket(_ bucket: String) async throws {
        _ = try await send("CreateBucket", method: "PUT", bucket: bucket, key: "", accept: [200, 409])
    }

    /// The least a ranged GET of a segmented download asks for (`DownloadOptions.requestFloor`).
    /// Every request costs an S3 server far more than a file server (SeaweedFS: its gateway, the
    /// filer's chunk list, the volume read): 1 GiB with 8 connections from SeaweedFS on this 2-core
    /// machine, twice 6 interleaved rounds: medians 1.13 and 1.13 s with 16 MiB requests, 0.99
    /// and 1.08 s with 64 MiB (s5cmd 1.12 and 1.10 s). In bench/s3.sh SeaweedFS had spent 1.59 s
    /// of CPU serving the 16 MiB requests against 1.31 s for s5cmd's.
    package static let requestFloor: Int64 = 64 << 20

    /// What the download engine needs to fetch `bucket/key` (see `S3DownloadSource`).
    /// Fails when no credentials can be had; each request of the download is signed with the credentials
    /// current when it is sent (if a refresh fails, with the last ones held).
    package func downloadSource(bucket: String, key: String) throws -> S3DownloadSource {
        let provider = configuration.credentialsProvider
        let first = try provider.credentials()
        let region = configuration.region
        return S3DownloadSource(url: configuration.url(bucket: bucket, key: key), signer: { method, url, headers in
            let signer = SigV4Signer(credentials: (try? provider.credentials()) ?? provider.lastKnown ?? first, region: region)
            // Asks for the object's stored checksum (`x-amz-checksum-*`), which the download then
            // checks when it is a full-object one (`PublishedChecksum`).
            var headers = headers
            if !headers.contains("x-amz-checksum-mode") { headers.set("x-amz-checksum-mode", "ENABLED") }
            return signer.sign(method: method, url: url, headers: headers, payloadHash: SigV4Signer.emptyPayloadHash).headers
        })
    }

    /// A signed request for `GET bucket/key` (S3 downloads run through the download engine with these headers).
    package func signedGetHeaders(bucket: String, key: String, extra: HTTPHeaders = [:]) throws -> (URL, HTTPHeaders) {
        let url = configuration.url(bucket: bucket, key: key)
        return (url, try signer().sign(method: "GET", url: url, headers: extra, payloadHash: SigV4Signer.unsignedPayload).headers)
    }

    // MARK: Sending

    /// One operation, retried by the policy. The payload is not hashed for
    /// files (`UNSIGNED-PAYLOAD`; Content-MD5 protects it) but is for XML.
    package func send(_ operation: String, method: String, bucket: String, key: String, query: String = "",
              headers: HTTPHeaders = [:], body: RequestBody = .none, accept: Set<Int> = [200, 204],
              rate: SendRate = SendRate(), inFlight: Int = 1, responseLimit: Int = 1 << 20,
              repeatAfterConnectionFailure: Bool = true,
              onProgress: (@Sendable (Int64) -> Void)? = nil) async throws -> Response {
        let url = configuration.url(bucket: bucket, key: key, query: query)
        let payloadHash: String
        switch body {
        case .none: payloadHash = SigV4Signer.emptyPayloadHash
        case .data(let data): payloadHash = SHA256Hasher.hex(of: data)
        default: payloadHash = SigV4Signer.unsignedPayload
        }
        var attempt = 0
        while true {
            attempt += 1
            // Signed per attempt: the date must be fresh (and the credentials: they may have been refreshed).
            let signer = try signer()
            let signed = signer.sign(method: method, url: url, headers: headers, payloadHash: payloadHash).headers
            let sink = CapturingSink(limit: responseLimit, url: url,
                                     advice: "check that \(Redaction.url(configuration.endpoint)) is an S3 endpoint"
                                        + " (--endpoint, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL)")
            var request = TransferRequest(method: method, url: url, headers: signed, body: body, tls: tls,
                                          onProgress: onProgress.map { callback in { @Sendable sent, _ in callback(sent) } })
            if body != .none { rate.apply(to: &request, inFlight: inFlight) }
            let failure: RetryPolicy.Failure
            var lastError: Error
            do {
                let outcome = try await transport.execute(request, sink: sink)
                let text = String(decoding: sink.body, as: UTF8.self)
                if accept.contains(outcome.head.status) {
                    return Response(status: outcome.head.status, headers: outcome.head.headers, body: text)
                }
                let document = S3ErrorDocument(text)
                let code = document?.code ?? "HTTP \(outcome.head.status)"
                if ["InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidClientTokenId", "ExpiredToken"].contains(code) {
                    throw S3Error.rejectedCredentials(endpoint: Redaction.url(configuration.endpoint), code: code,
                                                      accessKey: signer.credentials.accessKeyID)
                }
                lastError = S3Error.service(status: outcome.head.status, code: code,
                                            message: document?.message ?? "",
                                            operation: operation, endpoint: Redaction.url(configuration.endpoint))
                failure = .s3(status: outcome.head.status, code: code,
                              retryAfter: outcome.head.headers["Retry-After"].flatMap(RetryAfter.init(header:)))
            } catch let error as TransportError {
                if error.kind == .cancelled { throw CancellationError() }
                if !repeatAfterConnectionFailure { throw error }
                lastError = error
                failure = .transport(error.kind)
            }
            switch retry.decide(failure, attempt: attempt) {
            case .retry(let delay):
                if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
            case .giveUp:
                throw lastError
            }
        }
    }
}

/// An object as the download engine fetches it: its URL, and what every download from it sets
/// in its options (`configure`), so that no caller signs its requests but forgets their size.
package struct S3DownloadSource: Sendable {
    package let url: URL
    let signer: @Sendable (String, URL, HTTPHeaders) -> HTTPHeaders

    /// Signs each request of `options` and asks S3 for `S3Client.requestFloor` at a time.
    package func configure(_ options: inout DownloadOptions) {
        options.signer = signer
        options.requestFloor = S3Client.requestFloor
    }
}
