import Foundation

/// Checkpoints as bytes arrive, and the end: piece hashes, the checksum, the rename into place.
extension DownloadEngine {
    // MARK: Checkpoints and progress

    /// Reports progress four times a second and checkpoints every `checkpointInterval`.
    func tick(_ state: DownloadState) async {
        var lastCheckpoint = Date()
        while !Task.isCancelled {
            try? await Task.sleep(nanoseconds: UInt64(min(0.25, options.checkpointInterval) * 1e9))
            let plan = state.plan
            onEvent(.progress(written: plan.bytesWritten, totalSize: plan.totalSize, received: state.bytesReceived))
            if Date().timeIntervalSince(lastCheckpoint) >= options.checkpointInterval {
                try? saveCheckpoint(state)
                lastCheckpoint = Date()
            }
        }
    }

    /// Records the written bytes. With `sync` the file is synced first (data
    /// before the claim) and the checkpoint claims only durable bytes; without,
    /// it also claims bytes still in the page cache, trusted only in this boot
    /// (see `DownloadCheckpoint.trusted(inBoot:)`). `sync` defaults to
    /// `syncEachFile`; with it off the caller makes finished files durable in
    /// batches (the queue calls `syncfs` before committing finished jobs).
    func saveCheckpoint(_ state: DownloadState, sync: Bool? = nil) throws {
        // One at a time (the ticker, the transport threads and the error paths may meet), and
        // never across a reset: a snapshot taken before the file was started over must not be
        // saved, or marked synced, after it.
        state.persistLock.lock()
        defer { state.persistLock.unlock() }
        if let failure = state.syncFailure { throw failure }
        var checkpoint = state.checkpoint()
        state.checkpointTaken()
        if sync ?? options.syncEachFile {
            guard fdatasync(state.fd) == 0 else { throw syncFailed(state, checkpoint) }
            state.markDurable(checkpoint.plan)
            checkpoint.durable = nil
            checkpoint.bootID = nil
        }
        try store.save(checkpoint)
    }

    /// After a failed sync: the failure sticks to the download (see `DownloadState.syncFailure`)
    /// and the checkpoint keeps only the bytes synced before, so the retry fetches the rest again
    /// instead of trusting pages the kernel may have dropped. Returns the failure to throw.
    func syncFailed(_ state: DownloadState, _ checkpoint: DownloadCheckpoint) -> POSIXFailure {
        let failure = POSIXFailure(operation: "sync", path: state.partPath)
        state.noteSyncFailed(failure)
        try? store.save(checkpoint.durableOnly)
        return failure
    }

    // MARK: Finish

    /// Checks length and checksum, syncs, and renames the partial file into place.
    /// Checks the pieces a finished exchange wrote whole, as soon as they are on disk: a mirror
    /// that alone served a failing one is dropped at once, before it serves more (the bytes are
    /// fetched again when the file is complete, `checkPieces(_:state:size:)`).
    func checkPieces(of written: Range<Int64>, from mirror: Int?, state: DownloadState) {
        guard let pieces = options.pieces, let mirrors, let mirror, let size = state.plan.totalSize, !written.isEmpty else { return }
        let touched = pieces.pieces(overlapping: written)
        let whole = touched.filter { pieces.range(of: $0, size: size).clamped(to: written) == pieces.range(of: $0, size: size) }
        guard let first = whole.first, let last = whole.last,
              let failing = try? PieceCheck.failing(fd: state.fd, size: size, pieces: pieces, path: state.partPath,
                                                     only: first..<(last + 1)),
              let bad = failing.first, mirrors.sole(pieces.range(of: bad, size: size)) == mirrors.url(of: mirror) else { return }
        mirrors.drop(mirrors.url(of: mirror), reason: "piece \(bad) as it served it fails its \(pieces.algorithm.rawValue) hash")
    }

    /// Checks the complete file against the piece hashes: failing pieces are fetched again
    /// (`DownloadSignal.refetch`), and a mirror that alone served a failing piece is dropped first.
    func checkPieces(_ pieces: PieceHashes, state: DownloadState, size: Int64) throws {
        onEvent(.verifying)
        let failing = try PieceCheck.failing(fd: state.fd, size: size, pieces: pieces, path: state.partPath)
        guard let first = failing.first else { return }
        let ranges = failing.map { pieces.range(of: $0, size: size) }
        var culprits: [URL] = []
        var suspects: [URL] = []
        if let mirrors {
            for (index, range) in zip(failing, ranges) {
                suspects += mirrors.suspects(in: range).filter { !suspects.contains($0) }
                if let sole = mirrors.sole(range), !culprits.contains(sole) {
                    culprits.append(sole)
                    mirrors.drop(sole, reason: "piece \(index) as it served it fails its \(pieces.algorithm.rawValue) hash")
                }
            }
        }
        let named = suspects.map { Redaction.url($0) }
        let rounds = pieceRounds.withLock { rounds -> Int in
            rounds += 1
            return rounds
        }
        guard rounds <= Self.maxPieceRounds else {
            unlink(state.partPath)
            try? store.remove()
            throw DownloadError.piecesMismatch(path: options.destination, failing: failing.count, of: pieces.hashes.count,
                                               first: first, suspects: named)
        }
        throw DownloadSignal.refetch(ranges, reason: "\(failing.count) of \(pieces.hashes.count) pieces fail their "
            + "\(pieces.algorithm.rawValue) hashes (first: piece \(first))" + (named.isEmpty ? "" : "; served by \(named.joined(separator: ", "))"))
    }

    func finalize(_ state: DownloadState, _ file: PartFile) throws -> (Int64, String?) {
        let plan = state.plan
        var info = stat()
        guard fstat(state.fd, &info) == 0 else {
            throw DownloadError.local(POSIXFailure(operation: "stat", path: state.partPath))
        }
        // Checked, removed and renamed by its name below: a name that no longer names this file (a
        // worker that took the job over made a new one there, `PartFile.replaced`) is not ours to touch.
        guard PartFile.names(state.fd, state.partPath) else { throw DownloadError.partInUse(path: state.partPath) }
        let size = plan.totalSize ?? plan.bytesWritten
        if let expected = options.expectedSize, expected != size {
            unlink(state.partPath)
            try? store.remove()
            throw DownloadError.sizeMismatch(path: options.destination, expected: expected, actual: size)
        }
        if Int64(info.st_size) > size {
            ftruncate(state.fd, off_t(size))
        } else if Int64(info.st_size) < size {
            throw DownloadError.sizeMismatch(path: options.destination, expected: size, actual: Int64(info.st_size))
        }
        if let failure = state.syncFailure { throw DownloadError.local(failure) }
        if options.syncEachFile {
            guard fsync(state.fd) == 0 else {
                state.persistLock.lock()
                defer { state.persistLock.unlock() }
                throw DownloadError.local(syncFailed(state, state.checkpoint()))
            }
        } else {
            // The caller syncs in batches; start this file's writeback now so
            // the disk works while other transfers run, and the batch's sync
            // finds little left to wait for (from a thread of its own: see
            // `Writeback.startDetached`).
            Writeback.startDetached(state.fd)
        }
        if let pieces = options.pieces { try checkPieces(pieces, state: state, size: size) }
        var digest: String?
        if let expected = expectedSHA256 {
            onEvent(.verifying)
            let actual = try SHA256Hasher.hex(ofFileAt: state.partPath)
            if actual != expected, let mirrors, let narrowed = mirrors.narrowToOne() {
                // Several mirrors served it: one of them lied, or more. The bytes the others served
                // are fetched again from the one that served the most; the ones that then differ name it.
                // A later round proved one mirror wrong (dropped as it was narrowed): the suspects of
                // the round before are not named on its account.
                suspects.withLock { $0 = narrowed.proven ? [] : narrowed.suspects }
                let named = narrowed.suspects.map { Redaction.url($0) }.joined(separator: ", ")
                throw DownloadSignal.refetch(narrowed.refetch, reason: "the file's SHA-256 is \(actual), not \(expected); "
                    + "fetching from \(Redaction.url(narrowed.mirror)) what other mirrors served (suspects: \(named.isEmpty ? "none" : named))")
            }
            guard actual == expected else {
                unlink(state.partPath)
                try? store.remove()
                throw DownloadError.checksumMismatch(path: options.destination, expected: expected, actual: actual)
            }
            digest = actual
            // It matches now: the mirrors whose bytes were replaced served wrong ones.
            for suspect in suspects.withLock({ $0 }) {
                mirrors?.drop(suspect, reason: "suspect, not proven: the file failed its SHA-256 with bytes it served among "
                              + "others', and passed with them fetched from another mirror")
            }
        } else if let published = state.published {
            // No checksum from the job: the one the server published, if it did.
            onEvent(.verifying)
            let actual = try published.digest(ofFileAt: state.partPath)
            guard actual == published.value else {
                unlink(state.partPath)
                try? store.remove()
                throw DownloadError.publishedChecksumMismatch(
                    path: options.destination, algorithm: published.algorithm.rawValue, header: published.header,
                    expected: PublishedChecksum.shown(published.value, published.algorithm),
                    actual: PublishedChecksum.shown(actual, published.algorithm))
            }
            if published.algorithm == .sha256 { digest = PublishedChecksum.shown(actual, .sha256) }
        }
        if let modified = state.validators.lastModified.flatMap(HTTPDate.parse) {
            var times = [timespec(tv_sec: Int(modified.timeIntervalSince1970), tv_nsec: 0),
                         timespec(tv_sec: Int(modified.timeIntervalSince1970), tv_nsec: 0)]
            futimens(state.fd, &times)
        }
        // Complete: how far it was written says nothing more.
        state.removeWrittenRecord()
        // What this file is, for a later --skip-unchanged to ask the server about.
        RecordedValidators.write(state.validators, url: options.url, fd: state.fd)
        // The queue renames it later, and takes the tag off then (`PartFile.untag`).
        if options.deferRename { return (size, digest) }
        // Record completion first: a crash right after the rename is then recognised as done.
        try saveCheckpoint(state)
        guard rename(state.partPath, options.destination) == 0 else {
            throw DownloadError.local(POSIXFailure(operation: "rename", path: options.destination))
        }
        file.untag()
        if options.syncEachFile { AtomicFile.syncDirectory(of: options.destination) }
        try? store.remove()
        return (size, digest)
    }
}
