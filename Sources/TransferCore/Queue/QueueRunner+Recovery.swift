import Foundation

/// Recovery: jobs an earlier run or a dead worker left `finishing` (their file complete at its
/// partial path) are put in place and recorded done.
extension QueueRunner {
    /// What a finishing job whose partial file another process writes reports (once).
    static func busyFinishingReport(_ job: JobRecord) -> JobRetry {
        JobRetry(id: job.id, attempt: job.attempts, delay: busyFinishingRetry,
                 reason: "\(job.spec.destination.map(PartialNames.part(of:)) ?? job.id) is being written by another process; "
                     + "the job stays finishing until it is free, then puts its file in place")
    }

    /// Jobs an earlier run (or a worker that died) left `finishing`: rename what is still at the
    /// partial path, then done.
    /// - Parameter reportingBusy: false before the run has reported its start: the caller reports them.
    func completeFinishing(reportingBusy: Bool = true) throws {
        // A shared store hands this worker the jobs of dead ones, not those it holds already:
        // the busy ones it took earlier are tried again with them.
        try complete(try store.abandonedFinishing() + busyFinishing.values.map { $0 }, reportingBusy: reportingBusy)
    }

    /// Renames what is still at the partial path of each of `jobs` (finishing jobs no run of this
    /// store is finishing), then records them done. A job whose partial file another process
    /// writes stays finishing, reported once (`reportingBusy`).
    func complete(_ given: [JobRecord], reportingBusy: Bool = true) throws {
        var seenIDs: Set<String> = []
        let jobs = given.filter { seenIDs.insert($0.id).inserted }
        let reported = Set(busyFinishing.keys)
        busyFinishing = [:]
        lastBusyFinishingTry = Date()
        guard !jobs.isEmpty else { return }
        var finished: [(id: String, bytes: Int64, sha256: String?)] = []
        var finishedJobs: [JobRecord] = []
        // Each end owes its hook here too (a done hook the dead run owed already is not owed twice).
        func fail(_ job: JobRecord, _ reason: String) throws {
            let owed = try hooks.owing(hooks.due(job, .failed, error: reason).map { [$0] } ?? [])
            let recorded = try store.finish(job.id, state: .failed, error: reason, bytes: nil, sha256: nil, at: Date())
            owed.settle { _ in recorded }
        }
        for job in jobs {
            guard let destination = job.spec.destination else { continue }
            let part = PartialNames.finishingPart(of: destination)
            changedSources.insert(job.sourceFile)
            do {
                // Between runs a folder may have been swapped for a link: checked again before the rename.
                try ConfinedPath.check(destination, root: layout.root, create: false)
            } catch {
                try fail(job, String(describing: error))
                continue
            }
            let size = job.bytesTotal ?? job.bytesDone
            // Renamed under its lock: a `get` to the same destination may be writing a new
            // partial file since, and that file is not this job's to put in place. Left finishing
            // while another process holds it, and tried again (`busyFinishing`).
            let held: PartFile?
            do {
                held = try PartFile.lockExisting(part, takingOver: false)
            } catch DownloadError.partInUse {
                if reportingBusy && !reported.contains(job.id) { onEvent(.retrying(Self.busyFinishingReport(job))) }
                busyFinishing[job.id] = job
                continue
            } catch {
                try fail(job, String(describing: error))
                continue
            }
            defer { held?.close() }
            // A partial file that is there but could not be opened to lock (no permission, no
            // descriptor free) is renamed without its lock, as before there were locks: a rename
            // needs only the folder.
            if held != nil || DownloadEngine.exists(part), let reason = Self.moveIntoPlace(part: part, destination: destination),
               !Self.isInPlace(destination, size: size) {
                // Fails alone, with the reason: it must not stop this run or the next. (Another worker
                // may have renamed it a moment ago: then it is in place, and done.)
                try fail(job, reason)
                continue
            }
            guard Self.isInPlace(destination, size: size) else {
                try fail(job, "neither \(part) nor \(destination) is there (\(size) bytes) "
                         + "to complete the download; with a shared store, every worker must reach the destination "
                         + "at the same path. `transferd retry \(job.id)` fetches it again")
                continue
            }
            // This process never saw the tag (a dead run set it): taken off whether it is there or not.
            held?.untag(always: true)
            finished.append((job.id, size, job.sha256))
            finishedJobs.append(job)
        }
        let alreadyOwed = hooks.owedJobs(in: .done)
        let owed = try hooks.owing(finishedJobs.filter { !alreadyOwed.contains($0.id) }.compactMap { job in
            hooks.due(job, .done, bytes: job.bytesTotal ?? job.bytesDone, sha256: job.sha256)
        })
        let missed = try store.finishDone(finished, at: Date())
        owed.settle { !missed.contains($0) }
    }
}
