import Foundation

/// Where an S3 upload's resume state is kept: a file for `transferd put`, the
/// job's row in the queue. The state is JSON meaningful to any later process.
package protocol UploadStateStore: Sendable {
    func load() throws -> String?
    func save(_ json: String) throws
    func remove() throws
}

extension UploadStateStore {
    /// The record as `T`, or nil when there is none or it is not one.
    func decoded<T: Decodable>(_ type: T.Type) -> T? {
        guard let json = try? load() else { return nil }
        return try? JSONDecoder().decode(T.self, from: Data(json.utf8))
    }

    /// Saves `value` as JSON with sorted keys (callers hold their own lock: saves of one record never interleave).
    func saveEncoded<T: Encodable>(_ value: T) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try save(String(decoding: try encoder.encode(value), as: UTF8.self))
    }
}

extension S3Client {
    /// What every multipart checkpoint (an upload's, a copy's, a streamed copy's) records of its upload.
    struct RecordedUpload: Decodable {
        var bucket: String
        var key: String
        var uploadID: String
    }

    /// Aborts the multipart upload `state` records, if any, and forgets it. Forgotten first: a store
    /// that fenced this worker off refuses it, and the upload, the new owner's, is left alone.
    /// - Returns: false when the store refused.
    @discardableResult
    func abandonRecordedUpload(in state: UploadStateStore) async -> Bool {
        guard let saved = state.decoded(RecordedUpload.self) else { return true }
        do { try state.remove() } catch { return false }
        await abortRecordedUpload(bucket: saved.bucket, key: saved.key, uploadID: saved.uploadID)
        return true
    }

    /// The recorded parts (by number) the server still holds for the upload, with the same ETag and
    /// size; throws what ListParts throws (`S3MultipartUpload.uploadIsGone` for an upload gone).
    func partsStillHeld<Part>(_ parts: [Int: Part], etag: KeyPath<Part, String>, size: KeyPath<Part, Int64>,
                              bucket: String, key: String, uploadID: String) async throws -> [Int: Part] {
        let listed = try await listParts(bucket: bucket, key: key, uploadID: uploadID)
        return parts.filter { number, part in
            listed.contains { $0.number == number && S3MultipartUpload.unquote($0.etag) == S3MultipartUpload.unquote(part[keyPath: etag])
                && $0.size == part[keyPath: size] }
        }
    }

    /// Aborts a recorded multipart upload; with no id recorded (a run died between creating it
    /// and recording it), every upload open for the key. Failures are ignored: best effort.
    func abortRecordedUpload(bucket: String, key: String, uploadID: String) async {
        if uploadID.isEmpty {
            for id in (try? await openUploads(bucket: bucket, key: key)) ?? [] {
                try? await abortMultipartUpload(bucket: bucket, key: key, uploadID: id)
            }
        } else {
            try? await abortMultipartUpload(bucket: bucket, key: key, uploadID: uploadID)
        }
    }
}

/// A state file under `$XDG_STATE_HOME/transferd/uploads/` (default
/// `~/.local/state/...`), named by a hash of the source path and target.
package struct FileUploadStateStore: UploadStateStore {
    package let path: String

    package init(source: String, bucket: String, key: String, environment: [String: String] = ProcessInfo.processInfo.environment) {
        let home = environment["HOME"] ?? NSHomeDirectory()
        let base = environment["XDG_STATE_HOME"] ?? "\(home)/.local/state"
        let name = SHA256Hasher.hex(of: Data("\(source)\n\(bucket)\n\(key)".utf8)).prefix(24)
        path = "\(base)/transferd/uploads/\(name).json"
    }

    private init(path: String) { self.path = path }

    /// The checkpoint of `get s3://bucket/prefix/ -o FOLDER`, under
    /// `transferd/prefixes/`, named by a hash of the folder, bucket and prefix.
    package static func prefixDownload(folder: String, bucket: String, prefix: String,
                                      environment: [String: String] = ProcessInfo.processInfo.environment) -> FileUploadStateStore {
        let home = environment["HOME"] ?? NSHomeDirectory()
        let base = environment["XDG_STATE_HOME"] ?? "\(home)/.local/state"
        let name = SHA256Hasher.hex(of: Data("\(folder)\n\(bucket)\n\(prefix)".utf8)).prefix(24)
        return FileUploadStateStore(path: "\(base)/transferd/prefixes/\(name).json")
    }

    package func load() throws -> String? {
        FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
    }

    package func save(_ json: String) throws {
        try FileManager.default.createDirectory(atPath: PathText.parent(path),
                                                withIntermediateDirectories: true)
        try AtomicFile.write(Data(json.utf8), to: path)
    }

    package func remove() throws { unlink(path) }
}

/// What an interrupted multipart upload needs to continue in another process.
package struct S3UploadCheckpoint: Codable, Equatable, Sendable {
    package struct Part: Codable, Equatable, Sendable {
        package var etag: String
        package var size: Int64
        /// The part's CRC-32 (base64), when the upload was created with CRC32 checksums.
        package var crc32: String?
    }

    package var version = 1
    package var bucket: String
    package var key: String
    package var fileSize: Int64
    package var fileModified: Double
    package var partSize: Int64
    /// Empty while the upload is being created: a checkpoint like that, found later, means a
    /// run died between creating an upload and recording its id.
    package var uploadID: String
    /// Completed parts by number.
    package var parts: [Int: Part]
    /// `CRC32` when the upload was created with per-part CRC-32 checksums
    /// (absent in checkpoints of uploads started without them).
    package var checksumAlgorithm: String?
}

package struct S3UploadOptions: Sendable {
    package var source: String
    package var bucket: String
    package var key: String
    /// Requested part size; grown as needed so the file fits in 10,000 parts, at least 5 MiB.
    package var partSize: Int64
    package var partsInFlight: Int
    package var contentType: String?
    /// How fast the parts may go, all together (`--limit-rate`).
    package var rate = SendRate()
    /// Send nothing when the object already holds the file (`--skip-unchanged`):
    /// the same size and an ETag equal to the file's MD5, or to the multipart
    /// ETag the file gives with the part size that object was uploaded with.
    package var skipUnchanged = false

    package init(source: String, bucket: String, key: String, partSize: Int64 = 8 << 20, partsInFlight: Int = 10,
                contentType: String? = nil) {
        self.source = source
        self.bucket = bucket
        self.key = key
        self.partSize = partSize
        self.partsInFlight = max(1, partsInFlight)
        self.contentType = contentType
    }

    static let minimumPart: Int64 = 5 << 20
    static let maximumParts: Int64 = 10_000

    /// The part size S3's rules allow for a file of `size` bytes.
    package static func effectivePartSize(requested: Int64, fileSize: Int64) -> Int64 {
        var size = max(requested, minimumPart)
        let needed = (fileSize + maximumParts - 1) / maximumParts
        if needed > size { size = ((needed + (1 << 20) - 1) >> 20) << 20 }
        return size
    }
}

package struct S3UploadResult: Sendable {
    package var etag: String
    package var size: Int64
    package var parts: Int
    /// Parts sent in this run (fewer than `parts` after a resume).
    package var partsSent: Int
    package var resumed: Bool
    package var elapsed: TimeInterval
    /// The object already held the file: nothing was sent (`skipUnchanged`).
    package var unchanged = false
}

/// An S3 upload: one PUT below the part size, otherwise a multipart upload
/// with several parts in flight, each sent with Content-MD5 and its ETag
/// checked. The upload id and every finished part are checkpointed, so a
/// later run (after `kill -9`) reconciles them with ListParts and sends only
/// the missing parts. A permanent failure aborts the upload (no orphaned
/// parts); an interruption keeps it for the next run.
// Parts in flight are a `Locked` map; checkpoints are saved under `lock`.
package final class S3MultipartUpload: Sendable {
    let client: S3Client
    let options: S3UploadOptions
    let state: UploadStateStore
    let onEvent: @Sendable (UploadEvent) -> Void
    /// Bytes sent so far by each part in flight, by part number.
    private let partsInFlight = Locked<[Int: Int64]>([:])
    private let lock = NSLock()

    package init(client: S3Client, options: S3UploadOptions, state: UploadStateStore,
                onEvent: @escaping @Sendable (UploadEvent) -> Void = { _ in }) {
        self.client = client
        self.options = options
        self.state = state
        self.onEvent = onEvent
    }

    package func run() async throws -> S3UploadResult {
        let started = Date()
        if options.skipUnchanged, let head = try await client.headObjectIfPresent(bucket: options.bucket, key: options.key),
           try await Self.holds(options.source, size: head.size, etag: head.etag, requestedPartSize: options.partSize,
                                client: client, bucket: options.bucket, key: options.key) {
            // An upload an earlier run left open is aborted, not forgotten with its parts stored.
            await abandon()
            return S3UploadResult(etag: head.etag, size: head.size, parts: 0, partsSent: 0, resumed: false,
                                  elapsed: Date().timeIntervalSince(started), unchanged: true)
        }
        let fingerprint = try SourceFingerprint(path: options.source)
        var info = stat()
        guard stat(options.source, &info) == 0 else { throw UploadError.local(POSIXFailure(operation: "read", path: options.source)) }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            throw UploadError.local(POSIXFailure(operation: "upload (not a regular file)", path: options.source, code: EISDIR))
        }
        let size = Int64(info.st_size)
        let modified = Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9
        let partSize = S3UploadOptions.effectivePartSize(requested: options.partSize, fileSize: size)
        let contentType = options.contentType ?? MIMEType.guess(forPath: options.source)
        onEvent(.started(totalSize: size))

        if size <= partSize {
            let md5 = try FileDigests.compute(path: options.source, offset: 0, length: size, sha256: false).md5
            let events = onEvent
            let etag = try await client.putObject(bucket: options.bucket, key: options.key, path: options.source, length: size,
                                                  md5: md5, contentType: contentType,
                                                  rate: options.rate) { events(.progress(sent: $0, totalSize: size)) }
            try fingerprint.check(options.source)
            guard Self.unquote(etag) == md5.hexString else {
                throw S3Error.verification("the object's ETag \(etag) does not match the file's MD5 \(md5.hexString)")
            }
            return S3UploadResult(etag: etag, size: size, parts: 1, partsSent: 1, resumed: false,
                                  elapsed: Date().timeIntervalSince(started))
        }

        var checkpoint = try await resumeOrCreate(size: size, modified: modified, partSize: partSize, contentType: contentType)
        let resumed = !checkpoint.parts.isEmpty
        let count = Int((size + partSize - 1) / partSize)
        let missing = (1...count).filter { checkpoint.parts[$0] == nil }
        let sent = Locked<Int64>(checkpoint.parts.values.reduce(0) { $0 + $1.size })
        onEvent(.progress(sent: sent.current, totalSize: size))
        let uploadID = checkpoint.uploadID
        let crc = checkpoint.checksumAlgorithm == "CRC32"
        do {
            try await withThrowingTaskGroup(of: (Int, S3UploadCheckpoint.Part).self) { group in
                var next = missing.makeIterator()
                func launch() {
                    guard let number = next.next() else { return }
                    group.addTask { (number, try await self.sendPart(number, of: count, partSize: partSize, size: size,
                                                                      uploadID: uploadID, sent: sent,
                                                                      crc: crc)) }
                }
                for _ in 0..<options.partsInFlight { launch() }
                while let (number, part) = try await group.next() {
                    // A part read from another version of the file is never recorded.
                    try fingerprint.check(options.source)
                    checkpoint.parts[number] = part
                    try save(checkpoint)
                    launch()
                }
            }
            let etag = try await client.completeMultipartUpload(
                bucket: options.bucket, key: options.key, uploadID: checkpoint.uploadID,
                parts: checkpoint.parts.map { ($0.key, $0.value.etag, $0.value.crc32) })
            let expected = Self.multipartETag(checkpoint.parts.sorted { $0.key < $1.key }.map(\.value.etag))
            guard Self.unquote(etag) == expected else {
                throw S3Error.verification("the object's ETag \(etag) is not the expected \(expected) (MD5 of the part MD5s)")
            }
            try? state.remove()
            return S3UploadResult(etag: etag, size: size, parts: count, partsSent: missing.count, resumed: resumed,
                                  elapsed: Date().timeIntervalSince(started))
        } catch {
            if error is CancellationError || Task.isCancelled { throw CancellationError() }
            // A permanent failure: leave no orphaned parts behind. The upload is forgotten first:
            // a shared store refuses that to a worker that lost the job (frozen past its lease, say),
            // and then the upload belongs to the worker holding the job now, and is not aborted here.
            try state.remove()
            try? await client.abortMultipartUpload(bucket: options.bucket, key: options.key, uploadID: checkpoint.uploadID)
            // A file changed mid-upload makes parts fail their digests: say why.
            try fingerprint.check(options.source)
            throw error
        }
    }

    /// Continues the checkpointed upload when it still matches the file and
    /// the server still has it; otherwise starts a new one.
    private func resumeOrCreate(size: Int64, modified: Double, partSize: Int64, contentType: String) async throws -> S3UploadCheckpoint {
        // Recorded before the upload is created, so a kill between the two is recognised (below).
        var fresh = S3UploadCheckpoint(bucket: options.bucket, key: options.key, fileSize: size, fileModified: modified,
                                       partSize: partSize, uploadID: "", parts: [:], checksumAlgorithm: "CRC32")
        if let saved = state.decoded(S3UploadCheckpoint.self) {
            if !saved.uploadID.isEmpty, saved.bucket == options.bucket, saved.key == options.key, saved.fileSize == size,
               saved.fileModified == modified, saved.partSize == partSize {
                do {
                    var reconciled = saved
                    reconciled.parts = try await client.partsStillHeld(saved.parts, etag: \.etag, size: \.size, bucket: options.bucket,
                                                                       key: options.key, uploadID: saved.uploadID)
                    return reconciled
                } catch let error as S3Error where Self.uploadIsGone(error) {
                    // Aborted or completed meanwhile: a new upload below.
                } catch {
                    // Not known to be gone (the network, a 5xx): kept, and the attempt retried; its parts are not lost.
                    throw error
                }
            }
            // The file changed, the upload is gone, or it was never recorded. A write the store fences
            // comes before any abort: a worker that lost the job aborts nothing another worker uses.
            try save(fresh)
            // With no id recorded, a run died between creating an upload and recording it: that upload is
            // open on the server with no one to finish it, and the key's open uploads are aborted.
            await client.abortRecordedUpload(bucket: saved.bucket, key: saved.key, uploadID: saved.uploadID)
        } else {
            try save(fresh)
        }
        fresh.uploadID = try await client.createMultipartUpload(bucket: options.bucket, key: options.key, contentType: contentType)
        do {
            try save(fresh)
        } catch {
            // Not recorded (a shared store gave the job to another worker, say): not left open either.
            try? await client.abortMultipartUpload(bucket: options.bucket, key: options.key, uploadID: fresh.uploadID)
            throw error
        }
        return fresh
    }

    /// Whether the server says the multipart upload no longer exists (aborted or completed).
    static func uploadIsGone(_ error: S3Error) -> Bool {
        if case .service(let status, let code, _, _, _) = error { return code == "NoSuchUpload" || (status == 404 && code.isEmpty) }
        return false
    }

    private func sendPart(_ number: Int, of count: Int, partSize: Int64, size: Int64, uploadID: String,
                          sent: Locked<Int64>, crc: Bool) async throws -> S3UploadCheckpoint.Part {
        let offset = Int64(number - 1) * partSize
        let length = min(partSize, size - offset)
        let digests = try FileDigests.compute(path: options.source, offset: offset, length: length, sha256: false, crc32: crc)
        let md5 = digests.md5
        let crc32 = crc ? digests.crc32.base64 : nil
        let events = onEvent
        let inFlight = partsInFlight
        // Progress is the finished parts plus what each part in flight has sent so far.
        let (etag, returnedCRC) = try await client.uploadPart(bucket: options.bucket, key: options.key, uploadID: uploadID,
                                                              number: number, path: options.source, offset: offset,
                                                              length: length, md5: md5, crc32: crc32,
                                                              rate: options.rate,
                                                              inFlight: min(options.partsInFlight, count)) { partSent in
            let inFlightBytes = inFlight.withLock { parts -> Int64 in
                parts[number] = partSent
                return parts.values.reduce(0, +)
            }
            events(.progress(sent: sent.current + inFlightBytes, totalSize: size))
        }
        inFlight.withLock { _ = $0.removeValue(forKey: number) }
        guard Self.unquote(etag) == md5.hexString else {
            throw S3Error.verification("part \(number) came back with ETag \(etag), not the MD5 \(md5.hexString) of what was sent")
        }
        sent.withLock { $0 += length }
        if let crc32, let returnedCRC, returnedCRC != crc32 {
            throw S3Error.verification("part \(number) came back with CRC-32 \(returnedCRC), not the \(crc32) of what was sent")
        }
        return S3UploadCheckpoint.Part(etag: etag, size: length, crc32: crc32)
    }

    /// Aborts the recorded multipart upload, if any, and forgets it (a cancelled job).
    package func abandon() async { await client.abandonRecordedUpload(in: state) }

    private func save(_ checkpoint: S3UploadCheckpoint) throws {
        lock.lock()
        defer { lock.unlock() }
        try state.saveEncoded(checkpoint)
    }

    /// `holds`, asking the object for its first part's size when its ETag says it was sent in
    /// parts and the sizes tried without asking do not match (one HEAD, only then).
    static func holds(_ path: String, size: Int64, etag: String, requestedPartSize: Int64, client: S3Client,
                      bucket: String, key: String) async throws -> Bool {
        if try holds(path, size: size, etag: etag, requestedPartSize: requestedPartSize) { return true }
        var info = stat()
        guard unquote(etag).contains("-"), stat(path, &info) == 0, Int64(info.st_size) == size,
              let learned = try await client.firstPartSize(bucket: bucket, key: key) else { return false }
        return try holds(path, size: size, etag: etag, requestedPartSize: requestedPartSize, learnedPartSize: learned)
    }

    package static func unquote(_ etag: String) -> String { etag.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) }

    /// Whether the object (`size`, `etag`) already holds the file at `path`.
    /// A plain ETag is compared with the file's MD5; a multipart one (`X-N`)
    /// with the multipart ETag of the file cut into N parts, for each part size
    /// that gives N parts among the one this upload would use and the sizes
    /// tools commonly use (5, 8, 16, 32, 64, 100, 128, 256, 512 MiB) — the file
    /// is read once per such size. Any other ETag (SSE-KMS, a server's own) is
    /// never taken as a match: the file is sent.
    /// `learnedPartSize` is the object's own first part's size (`S3Client.firstPartSize`),
    /// tried first: an object sent by another tool with a part size none of the list has.
    package static func holds(_ path: String, size: Int64, etag rawETag: String, requestedPartSize: Int64,
                             learnedPartSize: Int64? = nil) throws -> Bool {
        var info = stat()
        guard stat(path, &info) == 0, Int64(info.st_size) == size else { return false }
        let etag = unquote(rawETag).lowercased()
        let pieces = etag.split(separator: "-")
        guard let digest = pieces.first, digest.count == 32, digest.allSatisfy(\.isHexDigit) else { return false }
        if pieces.count == 1 {
            let md5 = try FileDigests.compute(path: path, offset: 0, length: size, sha256: false).md5.hexString
            return md5 == etag
        }
        guard pieces.count == 2, let count = Int64(pieces[1]), count >= 1 else { return false }
        var candidates = learnedPartSize.map { [$0] } ?? []
        candidates.append(S3UploadOptions.effectivePartSize(requested: requestedPartSize, fileSize: size))
        candidates += [5, 8, 16, 32, 64, 100, 128, 256, 512].map { Int64($0) << 20 }
        var tried = Set<Int64>()
        for partSize in candidates where partSize > 0 && tried.insert(partSize).inserted && (size + partSize - 1) / partSize == count {
            var partETags: [String] = []
            var offset: Int64 = 0
            while offset < size {
                let length = min(partSize, size - offset)
                partETags.append(try FileDigests.compute(path: path, offset: offset, length: length, sha256: false).md5.hexString)
                offset += length
            }
            if multipartETag(partETags) == etag { return true }
        }
        return false
    }

    /// S3's multipart ETag: MD5 of the concatenated binary part MD5s, then `-N`.
    package static func multipartETag(_ partETags: [String]) -> String {
        var digest = Digest(.md5)
        for etag in partETags {
            let hex = Array(unquote(etag).utf8)
            var bytes: [UInt8] = []
            var index = 0
            while index + 1 < hex.count {
                bytes.append(UInt8(String(decoding: hex[index...index + 1], as: UTF8.self), radix: 16) ?? 0)
                index += 2
            }
            digest.update(bytes)
        }
        return "\(digest.finalize().hexString)-\(partETags.count)"
    }
}
