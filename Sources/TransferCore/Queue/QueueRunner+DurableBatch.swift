import Foundation

/// The durable batch: finished downloads are made durable together (one `syncfs` per
/// filesystem), renamed into place and recorded done in one transaction, off the run loop.
extension QueueRunner {
    /// Hands the finished downloads to the flusher, which makes them durable
    /// while the loop goes on filling the slots they freed.
    func startFlush() {
        let batch = pendingDone
        pendingDone = []
        lastFlush = Date()
        flushing = true
        flushingBatch = batch
        flusher.async { [self, post] in
            do {
                post.yield(.flushed(batch, try makeDurable(batch), nil))
            } catch {
                post.yield(.flushed(batch, Flushed(), error))
            }
        }
    }

    /// Makes the finished files durable with one `syncfs` of each filesystem
    /// they are on, then commits their "done" in one transaction.
    /// A job whose rename fails (the destination became a folder, a read-only
    /// folder) fails alone, with the reason: it never stops the run.
    /// - Returns: the reasons of the jobs whose rename failed, by job id, and the jobs lost to another worker.
    func makeDurable(_ batch: [PendingDone]) throws -> Flushed {
        let unsyncedAll = Self.sync(batch, root: layout.root)
        let finished = batch.map { ($0.job.record.id, $0.result.size, $0.result.sha256) }
        // Owed before anything is recorded: a run that dies from here on runs them next time.
        let owed = try hooks.owing(batch.compactMap { hooks.due($0.job.record, .done, bytes: $0.result.size, sha256: $0.result.sha256) })
        // Recorded as finishing before the renames, so a run that dies among them completes them next time.
        // A job a shared store gave to another worker is that worker's to finish: not renamed here.
        let lost = try store.markFinishing(finished)
        // A file whose data did not reach the disk is removed, not renamed (Linux may have dropped
        // the pages it could not write, so its content is unknown and a retry fetches it whole) —
        // unless another worker holds the job now: the partial file is then that worker's.
        let unsynced = unsyncedAll.filter { !lost.contains($0.key) }
        for item in batch where unsynced[item.job.record.id] != nil {
            if let part = item.result.completedPartPath, Self.namesItsFile(item.result) { unlink(part) }
        }
        var failures = unsynced
        for item in batch where !lost.contains(item.job.record.id) && unsynced[item.job.record.id] == nil {
            guard let part = item.result.completedPartPath else { continue }
            // Renamed by its name: one that names another file now (a worker that took the job
            // over made a new one there, `PartFile.replaced`) is not this run's to put in place.
            guard Self.namesItsFile(item.result) else {
                failures[item.job.record.id] = "\(part) is no longer the file this run wrote (another worker took the job "
                    + "over and made a new one); left to it — `transferd retry \(item.job.record.id)` fetches it again if it fails"
                continue
            }
            if let reason = Self.moveIntoPlace(part: part, destination: item.result.path) {
                failures[item.job.record.id] = reason
            } else {
                // Recorded finishing: the job's checkpoint, and with it the file's tag, have served.
                item.result.partFile?.untag()
            }
        }
        let owedFailed = try hooks.owing(batch.compactMap { item in
            failures[item.job.record.id].flatMap { hooks.due(item.job.record, .failed, error: $0) }
        })
        var failedUnrecorded: Set<String> = []
        for (id, reason) in failures where try !store.finish(id, state: .failed, error: reason, bytes: nil, sha256: nil, at: Date()) {
            failedUnrecorded.insert(id)
        }
        let missed = try store.finishDone(finished.filter { failures[$0.0] == nil && !lost.contains($0.0) }, at: Date())
        // A done hook is started only for a job recorded done; a failed rename owes its failed hook instead.
        owed.settle { failures[$0] == nil && !lost.contains($0) && !missed.contains($0) }
        owedFailed.settle { !failedUnrecorded.contains($0) }
        // Not recorded done: a user cancelled it while it was renamed, or another worker took it.
        let cancelled = try cancelledMeanwhile(missed)
        return Flushed(renameFailures: failures, lost: lost.union(missed.subtracting(cancelled)), cancelled: cancelled)
    }

    /// Makes a batch's files durable (see `syncFiles`). Nothing is removed here: the caller
    /// removes the failed ones it still holds.
    /// - Returns: the reasons, by job id.
    static func sync(_ batch: [PendingDone], root: String) -> [String: String] {
        syncFiles(batch.compactMap { item in
            item.result.completedPartPath.map { (item.job.record.id, $0, item.result.partFile?.fd) }
        }, root: root)
    }

    /// One `syncfs` for each filesystem the files and the root are on (a destination inside the
    /// root may sit on another mount, which the root's `syncfs` does not reach); on a filesystem
    /// whose `syncfs` reports an error (or that cannot be reached), each of its files alone, so
    /// only the files whose data did not reach the disk fail.
    ///
    /// A file still open (the queue holds each finished download's partial file until its rename)
    /// is looked at and synced through its descriptor: nothing is opened for it, so a process
    /// with as many files open as it may still syncs them.
    /// - Parameters:
    ///   - files: job id, file path, and the file's descriptor when it is open.
    ///   - syncfs: `syncfs(2)`; a test watches which filesystems it is given.
    /// - Returns: the reasons, by job id.
    static func syncFiles(_ files: [(id: String, path: String, fd: Int32?)], root: String,
                          syncfs: (Int32) -> Int32 = { linuxSyncfs($0) }) -> [String: String] {
        func device(_ path: String, _ fd: Int32?) -> dev_t? {
            var info = stat()
            let found = fd.map { fstat($0, &info) } ?? stat(path, &info)
            return found == 0 ? info.st_dev : nil
        }
        // Each file's filesystem, looked at once. Files that cannot be looked at are synced alone.
        let devices = files.map { device($0.path, $0.fd) }
        var seen: Set<dev_t> = []
        var synced: Set<dev_t> = []
        // The root's filesystem first, then the others in the order of their files.
        for (found, path) in zip([device(root, nil)] + devices, [root] + files.map(\.path)) {
            guard let found, seen.insert(found).inserted else { continue }
            // An open file of that filesystem serves; otherwise the path is opened.
            let held = zip(files, devices).first { $0.1 == found && $0.0.fd != nil }?.0.fd
            let fd = held ?? open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { continue }
            if syncfs(fd) == 0 { synced.insert(found) }
            if held == nil { close(fd) }
        }
        var failures: [String: String] = [:]
        for (file, found) in zip(files, devices) where !(found.map(synced.contains) ?? false) {
            let fd = file.fd ?? open(file.path, O_RDONLY | O_CLOEXEC)
            let ok = fd >= 0 && fsync(fd) == 0
            let reason = String(cString: strerror(errno))
            if fd >= 0 && file.fd == nil { close(fd) }
            guard !ok else { continue }
            failures[file.id] = "sync \(file.path): \(reason); the disk did not take the file's data, so the download was removed "
                + "(check the disk, then `transferd retry \(file.id)` fetches it again)"
        }
        return failures
    }

    /// Which of the jobs a store did not record done were cancelled by a user meanwhile (the rest
    /// moved to another worker).
    func cancelledMeanwhile(_ ids: Set<String>) throws -> Set<String> {
        try Set(ids.filter { try store.job($0)?.state == .cancelled })
    }

    /// Whether `destination` is a regular file of `size` bytes.
    static func isInPlace(_ destination: String, size: Int64) -> Bool {
        var info = stat()
        return lstat(destination, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG && Int64(info.st_size) == size
    }

    /// Renames a finished partial file into place; the reason when that fails.
    /// Whether a finished download's partial path still names the file it wrote (true when the
    /// result holds no open file to compare: renamed by name, as before there were locks).
    static func namesItsFile(_ result: DownloadResult) -> Bool {
        guard let part = result.completedPartPath, let file = result.partFile else { return true }
        return PartFile.names(file.fd, part)
    }

    static func moveIntoPlace(part: String, destination: String) -> String? {
        guard rename(part, destination) != 0 else { return nil }
        let failure = POSIXFailure(operation: "rename \(part) to", path: destination)
        var info = stat()
        if lstat(destination, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR {
            return "the destination \(destination) is a folder; the download is kept in \(part). "
                + "Remove the folder or give the job another \"dest\", then `transferd retry`"
        }
        return "\(failure); the download is kept in \(part)"
    }

    func recordDone(_ batch: [PendingDone], _ flushed: Flushed, into summary: inout RunSummary) {
        let lost = batch.map(\.job.record.id).filter(flushed.lost.contains)
        if !lost.isEmpty { onEvent(.paused(ids: lost)) }
        for item in batch where !flushed.lost.contains(item.job.record.id) {
            let record = item.job.record
            changedSources.insert(record.sourceFile)
            if let reason = flushed.renameFailures[record.id] {
                summary.failed += 1
                onEvent(Self.finishedEvent(record, state: .failed, bytes: nil, elapsed: item.elapsed, error: reason))
                continue
            }
            if flushed.cancelled.contains(record.id) {
                summary.cancelled += 1
                onEvent(Self.finishedEvent(record, state: .cancelled, bytes: nil, elapsed: item.elapsed,
                                           error: "cancelled by the user while its file was renamed into place (\(item.result.path))"))
                continue
            }
            summary.done += 1
            var finished = Self.finishedEvent(record, state: .done, bytes: item.result.size, elapsed: item.elapsed,
                                              sha256: item.result.sha256, skipped: item.result.skipped)
            if case .finished(var end) = finished, !item.result.mirrors.isEmpty {
                end.mirrors = item.result.mirrors
                finished = .finished(end)
            }
            onEvent(finished)
        }
    }
}

/// syncfs(2): flushes one filesystem (declared only under _GNU_SOURCE, which Swift's Glibc module lacks).
@_silgen_name("syncfs")
func linuxSyncfs(_ fd: Int32) -> Int32
