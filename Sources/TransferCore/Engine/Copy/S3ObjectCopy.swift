import Foundation

package struct S3CopyOptions: Sendable {
    package var source: S3Location
    package var bucket: String
    package var key: String
    /// The part size for an object copied in parts that are not its own (over 5 GiB, single part).
    package var partSize: Int64
    package var partsInFlight: Int
    /// Copy nothing when the destination already holds the source (`S3CopyPlan.holds`).
    package var skipUnchanged = false

    package init(source: S3Location, bucket: String, key: String, partSize: Int64 = 64 << 20, partsInFlight: Int = 10) {
        self.source = source
        self.bucket = bucket
        self.key = key
        self.partSize = partSize
        self.partsInFlight = max(1, partsInFlight)
    }
}

package struct S3CopyResult: Sendable {
    package var etag: String
    package var size: Int64
    /// 1 for a CopyObject.
    package var parts: Int
    /// Parts copied in this run (fewer than `parts` after a resume).
    package var partsCopied: Int
    package var resumed: Bool
    package var elapsed: TimeInterval
    /// The destination already held the source: nothing was copied (`skipUnchanged`).
    package var unchanged = false
    /// What the copy was checked against (`.sameETag`, or `.sizeOnly` with why).
    package var verdict: S3CopyPlan.Verdict
    /// The source's ETag: the version copied.
    package var sourceETag = ""
}

/// What an interrupted multipart copy needs to continue in another process.
package struct S3CopyCheckpoint: Codable, Equatable, Sendable {
    package struct Part: Codable, Equatable, Sendable {
        package var etag: String
        package var size: Int64
    }

    package var version = 1
    package var sourceBucket: String
    package var sourceKey: String
    /// The source's ETag when the copy began: parts of another version are never joined to these.
    package var sourceETag: String
    package var size: Int64
    package var bucket: String
    package var key: String
    package var partSize: Int64
    /// Empty while the upload is being created (a run that died in between left one open).
    package var uploadID: String
    package var parts: [Int: Part]
}

/// A copy of one S3 object to another key on the same endpoint, made by the
/// server: no byte passes through this machine. CopyObject up to 5 GiB, else
/// (and for a multipart source, along its own parts) UploadPartCopy with
/// several parts in flight and the source's headers and metadata sent again,
/// which a multipart upload does not carry over by itself.
///
/// Every request names the version it copies (`x-amz-copy-source-if-match`),
/// and the source is asked again before the parts are joined: a source that
/// changed on the way is copied again from the start, never joined from two
/// versions (moto ignores the condition; the second look catches it there).
/// The upload id and every copied part are checkpointed in `state`, so a
/// later run continues after `kill -9`.
// Checkpoints are saved under `lock`; progress counts live in `Locked` values.
package final class S3ObjectCopy: Sendable {
    let client: S3Client
    let options: S3CopyOptions
    let state: UploadStateStore
    let onEvent: @Sendable (UploadEvent) -> Void
    private let lock = NSLock()

    /// How many times a source that keeps changing is copied again before the copy gives up.
    static let restartsForChangedSource = 3

    /// The source as a listing gave it (size and ETag), which spares its HEAD when that is all
    /// the copy needs (a single-part object copied whole).
    let listed: S3ObjectHead?

    package init(client: S3Client, options: S3CopyOptions, state: UploadStateStore, listed: S3ObjectHead? = nil,
                onEvent: @escaping @Sendable (UploadEvent) -> Void = { _ in }) {
        self.client = client
        self.options = options
        self.state = state
        self.listed = listed
        self.onEvent = onEvent
    }

    /// The copy must start again: its source changed (its ETag, or a 412 to the copy's condition),
    /// or its multipart upload was aborted on the server.
    struct SourceChanged: Error {
        var detail: String
    }

    package func run() async throws -> S3CopyResult {
        let started = Date()
        var restarts = 0
        while true {
            do {
                var result = try await attempt(trustListing: restarts == 0)
                result.elapsed = Date().timeIntervalSince(started)
                return result
            } catch let changed as SourceChanged {
                restarts += 1
                await abandon()
                guard restarts <= Self.restartsForChangedSource else {
                    throw UploadError.sourceChanged(path: describeSource, detail: "\(changed.detail); copied again "
                                                    + "\(Self.restartsForChangedSource) times, then given up")
                }
            }
        }
    }

    private var describeSource: String { "s3://\(options.source.bucket)/\(options.source.key)" }

    private func attempt(trustListing: Bool) async throws -> S3CopyResult {
        // A listed single-part object up to 5 GiB needs nothing but its size and ETag; any other
        // needs its headers (a copy in parts sends them again) and its parts' sizes.
        let fromListing = listed.flatMap { listed -> S3ObjectHead? in
            guard trustListing, !options.skipUnchanged, listed.size >= 0, listed.size <= S3CopyPlan.wholeCopyLimit,
                  S3CopyPlan.ETagShape(listed.etag).isPlainMD5 else { return nil }
            return listed
        }
        let head: S3ObjectHead?
        if let fromListing {
            head = fromListing
        } else {
            head = try await client.headForCopy(bucket: options.source.bucket, key: options.source.key)
        }
        guard let source = head else {
            throw S3Error.service(status: 404, code: "NoSuchKey", message: "\(describeSource): no such object to copy",
                                  operation: "HeadObject", endpoint: Redaction.url(client.configuration.endpoint))
        }
        if options.skipUnchanged, let held = try await client.headObjectIfPresent(bucket: options.bucket, key: options.key),
           S3CopyPlan.holds(size: held.size, etag: held.etag, sourceSize: source.size, sourceETag: source.etag) {
            await abandon()
            return S3CopyResult(etag: held.etag, size: held.size, parts: 0, partsCopied: 0, resumed: false, elapsed: 0,
                                unchanged: true, verdict: .sameETag, sourceETag: source.etag)
        }
        let firstPart = S3CopyPlan.ETagShape(source.etag).partCount.map { $0 > 1 } == true
            ? try await client.firstPartSize(bucket: options.source.bucket, key: options.source.key) : nil
        let method = S3CopyPlan.method(size: source.size, etag: source.etag, firstPartSize: firstPart,
                                       requestedPartSize: options.partSize)
        onEvent(.started(totalSize: source.size))
        switch method {
        case .whole:
            // A copy in parts an earlier run began (of another version, say) is not left open.
            await abandon()
            let etag: String
            do {
                etag = try await client.copyObject(from: options.source, ifMatch: source.etag, toBucket: options.bucket, key: options.key)
            } catch let error as S3Error where Self.isChangedSource(error) {
                throw await refusedCondition(source)
            } catch let error as S3Error {
                if let changed = await changeOf(source) { throw changed }
                throw error
            }
            onEvent(.progress(sent: source.size, totalSize: source.size))
            // The copy has the source's MD5: it is those bytes, of the version named, with nothing more to ask.
            if S3CopyPlan.ETagShape(source.etag).isPlainMD5,
               S3CopyPlan.ETagShape(etag).normalized == S3CopyPlan.ETagShape(source.etag).normalized {
                return S3CopyResult(etag: etag, size: source.size, parts: 1, partsCopied: 1, resumed: false, elapsed: 0,
                                    verdict: .sameETag, sourceETag: source.etag)
            }
            try await checkUnchanged(source)
            return try await finish(source: source, etag: etag, method: method, partETags: [], parts: 1, copied: 1, resumed: false)
        case .parts(let partSize, let count, _):
            return try await copyInParts(source: source, partSize: partSize, count: count, method: method)
        }
    }

    private func copyInParts(source: S3ObjectHead, partSize: Int64, count: Int, method: S3CopyPlan.Method) async throws -> S3CopyResult {
        var checkpoint = try await resumeOrCreate(source: source, partSize: partSize)
        let resumed = !checkpoint.parts.isEmpty
        let missing = (1...count).filter { checkpoint.parts[$0] == nil }
        let copied = Locked<Int64>(checkpoint.parts.values.reduce(0) { $0 + $1.size })
        onEvent(.progress(sent: copied.current, totalSize: source.size))
        let uploadID = checkpoint.uploadID
        do {
            try await withThrowingTaskGroup(of: (Int, S3CopyCheckpoint.Part).self) { group in
                var next = missing.makeIterator()
                func launch() {
                    guard let number = next.next() else { return }
                    group.addTask {
                        let offset = Int64(number - 1) * partSize
                        let length = min(partSize, source.size - offset)
                        let etag = try await self.client.uploadPartCopy(
                            from: self.options.source, ifMatch: source.etag, offset: offset, length: length,
                            toBucket: self.options.bucket, key: self.options.key, uploadID: uploadID, number: number)
                        return (number, S3CopyCheckpoint.Part(etag: etag, size: length))
                    }
                }
                for _ in 0..<options.partsInFlight { launch() }
                while let (number, part) = try await group.next() {
                    checkpoint.parts[number] = part
                    try save(checkpoint)
                    let total = copied.withLock { $0 += part.size; return $0 }
                    onEvent(.progress(sent: total, totalSize: source.size))
                    launch()
                }
            }
            // Asked again before the parts are joined: parts of two versions never become an object.
            try await checkUnchanged(source)
            let ordered = checkpoint.parts.sorted { $0.key < $1.key }
            let etag = try await client.completeMultipartUpload(bucket: options.bucket, key: options.key, uploadID: uploadID,
                                                                parts: ordered.map { ($0.key, $0.value.etag, nil) })
            try? state.remove()
            return try await finish(source: source, etag: etag, method: method, partETags: ordered.map(\.value.etag),
                                    parts: count, copied: missing.count, resumed: resumed)
        } catch {
            if error is CancellationError || Task.isCancelled { throw CancellationError() }
            if let error = error as? S3Error, Self.isChangedSource(error) { throw await refusedCondition(source) }
            if let error = error as? S3Error, S3MultipartUpload.uploadIsGone(error) {
                // Aborted by someone else (a lifecycle rule, an operator): started again with a new upload.
                try? state.remove()
                throw SourceChanged(detail: "the multipart upload \(uploadID) was aborted on the server meanwhile")
            }
            if error is SourceChanged { throw error }
            // A part refused for a range the source no longer has, say: a changed source is copied again.
            if let changed = await changeOf(source) { throw changed }
            // A permanent failure leaves no parts behind (forgotten first, as `S3MultipartUpload` does:
            // a store that fenced this worker off refuses it, and the upload is the new owner's).
            try state.remove()
            try? await client.abortMultipartUpload(bucket: options.bucket, key: options.key, uploadID: uploadID)
            throw error
        }
    }

    /// What a 412 to the copy's condition means: the source changed (start again), or, when the
    /// source still has the ETag named, a server that refuses its own ETag (a failure, said so).
    private func refusedCondition(_ source: S3ObjectHead) async -> Error {
        if let changed = await changeOf(source) { return changed }
        return S3Error.verification("the server refused x-amz-copy-source-if-match with the ETag \(source.etag) that its own HEAD "
                                    + "of \(describeSource) reports; this server cannot copy with a condition")
    }

    /// Checks the copy against the source and returns the result (or throws when it differs).
    private func finish(source: S3ObjectHead, etag: String, method: S3CopyPlan.Method, partETags: [String],
                        parts: Int, copied: Int, resumed: Bool) async throws -> S3CopyResult {
        let shown = "s3://\(options.bucket)/\(options.key)"
        guard let copy = try await client.headForCopy(bucket: options.bucket, key: options.key) else {
            throw S3Error.verification("the copy \(shown) is not there after the server said it was made (HeadObject answered 404)")
        }
        var verdict = S3CopyPlan.verdict(sourceSize: source.size, sourceETag: source.etag, copySize: copy.size, copyETag: copy.etag,
                                         method: method, partETags: partETags, digests: !source.encrypted && !copy.encrypted)
        if case .partsInDoubt(let reason) = verdict, case .parts(let partSize, let count, _) = method {
            // Other bytes, unless the source's parts are not as even as its first part and count made them seem.
            var even = true
            for number in 1...count {
                let expected = number < count ? partSize : source.size - Int64(count - 1) * partSize
                guard let length = try await client.partLength(bucket: options.source.bucket, key: options.source.key, number: number),
                      length == expected else {
                    even = false
                    break
                }
            }
            verdict = even ? .differs("\(reason), though it was copied along the source's own \(count) parts")
                : .sizeOnly("the source's parts are not all as long as its first (\(reason))")
        }
        if case .differs(let reason) = verdict {
            throw S3Error.verification("the copy \(shown) is not \(describeSource): \(reason)")
        }
        return S3CopyResult(etag: copy.etag, size: copy.size, parts: parts, partsCopied: copied,
                            resumed: resumed, elapsed: 0, verdict: verdict, sourceETag: source.etag)
    }

    /// Throws `SourceChanged` when the source's ETag is no longer `source.etag`.
    private func checkUnchanged(_ source: S3ObjectHead) async throws {
        let now = try await client.headForCopy(bucket: options.source.bucket, key: options.source.key)
        guard let now, S3CopyPlan.ETagShape(now.etag).normalized == S3CopyPlan.ETagShape(source.etag).normalized,
              now.size == source.size else {
            throw SourceChanged(detail: now.map { "ETag \(source.etag), now \($0.etag)" } ?? "ETag \(source.etag), now deleted")
        }
    }

    /// The change, when the source is known to have changed since `source` (nil: unchanged, or unknown).
    private func changeOf(_ source: S3ObjectHead) async -> SourceChanged? {
        do {
            try await checkUnchanged(source)
            return nil
        } catch let changed as SourceChanged {
            return changed
        } catch {
            return nil
        }
    }

    static func isChangedSource(_ error: S3Error) -> Bool {
        if case .service(let status, let code, _, _, _) = error { return status == 412 || code == "PreconditionFailed" }
        return false
    }

    /// Continues the checkpointed copy when it is of this version of the source into this
    /// key with these parts, and the server still has it; otherwise starts a new one.
    private func resumeOrCreate(source: S3ObjectHead, partSize: Int64) async throws -> S3CopyCheckpoint {
        var fresh = S3CopyCheckpoint(sourceBucket: options.source.bucket, sourceKey: options.source.key, sourceETag: source.etag,
                                     size: source.size, bucket: options.bucket, key: options.key, partSize: partSize,
                                     uploadID: "", parts: [:])
        if let saved = state.decoded(S3CopyCheckpoint.self) {
            var same = fresh
            same.uploadID = saved.uploadID
            same.parts = saved.parts
            if !saved.uploadID.isEmpty, saved == same {
                do {
                    var reconciled = saved
                    reconciled.parts = try await client.partsStillHeld(saved.parts, etag: \.etag, size: \.size, bucket: options.bucket,
                                                                       key: options.key, uploadID: saved.uploadID)
                    return reconciled
                } catch let error as S3Error where S3MultipartUpload.uploadIsGone(error) {
                    // Aborted or completed meanwhile: a new upload below.
                }
            }
            // Another version, another key or layout, or an upload never recorded: recorded first (a store
            // that fenced this worker off refuses it, and nothing is aborted), then the old one aborted.
            try save(fresh)
            await client.abortRecordedUpload(bucket: saved.bucket, key: saved.key, uploadID: saved.uploadID)
        } else {
            try save(fresh)
        }
        var headers = source.carried
        if !headers.contains("Content-Type") { headers.set("Content-Type", "application/octet-stream") }
        // A copy in parts starts with no tags: the source's are sent again.
        if source.tagCount > 0 {
            let tags = try await client.objectTagging(bucket: options.source.bucket, key: options.source.key)
            if !tags.isEmpty { headers.set("x-amz-tagging", S3Tag.header(tags)) }
        }
        fresh.uploadID = try await client.createMultipartUpload(bucket: options.bucket, key: options.key, headers: headers)
        do {
            try save(fresh)
        } catch {
            try? await client.abortMultipartUpload(bucket: options.bucket, key: options.key, uploadID: fresh.uploadID)
            throw error
        }
        return fresh
    }

    /// Aborts the recorded multipart copy, if any, and forgets it (a cancelled job, a changed source).
    package func abandon() async { await client.abandonRecordedUpload(in: state) }

    private func save(_ checkpoint: S3CopyCheckpoint) throws {
        lock.lock()
        defer { lock.unlock() }
        try state.saveEncoded(checkpoint)
    }
}
