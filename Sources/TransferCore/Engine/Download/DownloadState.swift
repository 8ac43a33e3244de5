import Foundation

/// The shared, locked state of one running download: the partial file, its
/// segment plan and the remote version it holds. Sinks on transport threads
/// and the engine's tasks meet here.
// The plan, validators, counters and thresholds live in `fields`, the writers in `writers`, the
// file's tag in `tag`: each a Locked box.
final class DownloadState: Sendable {
    let fd: Int32
    let partPath: String
    let url: URL
    let limiter: BandwidthLimiter?

    private struct Fields {
        var plan: SegmentPlan
        /// The bytes of `plan` known synced (see `DownloadCheckpoint.durable`).
        var durable: SegmentPlan
        var validators: ResponseValidators
        var rangesSupported: Bool
        var bytesReceived: Int64 = 0
        /// The size disk space was reserved for.
        var reserved: Int64 = 0
        /// Bytes written since the last checkpoint, and since the last synced one.
        var sinceCheckpoint: Int64 = 0
        var sinceSync: Int64 = 0
        /// The most bytes the partial file ever held for this remote version: only
        /// bytes beyond it are progress (a server that cannot resume sends the
        /// same first bytes again and again).
        var furthest: Int64
        /// See `DownloadCheckpoint.restarts`.
        var restarts: Int
        /// See `syncFailure`.
        var syncFailure: POSIXFailure?
        /// This incarnation of the partial file (`DownloadCheckpoint.writtenID`).
        var writtenID: String
        /// Bytes written since the file's own record (`WrittenOffsets`) was asked for.
        var sinceWrittenRecord: Int64 = 0
        /// Whether the file may carry a `WrittenOffsets` record (one was written, or found).
        var writtenRecorded = false
        /// For each segment whose connection is receiving a bounded range: where that range
        /// ends, where it started and when (`DispatchTime` nanoseconds). A split cuts into it
        /// only when the connection is slow (see `SegmentPlan.splitLargestRemainder`).
        var requests: [Int: (end: Int64, from: Int64, sent: UInt64)] = [:]
        /// The checksum the server published for the version being written (`PublishedChecksum`).
        var published: PublishedChecksum?
        var writeBufferSize = DownloadOptions.defaultWriteBufferSize
        var checkpointEvery: Int64?
        var syncEvery: Int64?
        var writtenRecordEvery: Int64?
    }

    /// Set by the engine from `DownloadOptions.writeBufferSize`.
    var writeBufferSize: Int {
        get { fields.withLock { $0.writeBufferSize } }
        set { fields.withLock { $0.writeBufferSize = newValue } }
    }

    /// Where checkpoints and written-offsets records are handed to be saved, set by the engine
    /// before any exchange starts: `persist` asks for a checkpoint (the argument: sync), drained by
    /// the engine through `checkpoint` before the file is finalised or closed; `written` records how
    /// far each segment is written on the file itself (see `WrittenOffsets`).
    struct Writers {
        var checkpoint: CheckpointWriter?
        var persist: ((Bool) -> Void)?
        var written: CheckpointWriter?
    }
    let writers = Locked(Writers())

    /// Checkpoint after `checkpointEvery` bytes (nil: by time only), sync the file with one after
    /// `syncEvery` bytes (nil: never by bytes), record the written offsets after `writtenRecordEvery`
    /// bytes (nil: never); set by the engine before any exchange starts.
    func setThresholds(checkpointEvery: Int64?, syncEvery: Int64?, writtenRecordEvery: Int64?) {
        fields.withLock {
            $0.checkpointEvery = checkpointEvery
            $0.syncEvery = syncEvery
            $0.writtenRecordEvery = writtenRecordEvery
        }
    }

    private let fields: Locked<Fields>
    /// See `DownloadCheckpoint.fileTag`: the file keeps it when it starts over. A file the download
    /// created is tagged when its first checkpoint is saved (`tagFile`, set by `tagWhenSaved`): one
    /// that is complete before that (most small files) needs no tag, and gets none.
    private let tag: Locked<(current: String?, pending: (() -> PartFile.Tagging)?)>
    /// Held while a checkpoint is taken and saved, and while the file is started over
    /// (`reset`), so neither happens in the middle of the other. Taken before `fields`.
    let persistLock = PlainLock()
    /// Held while the file's `WrittenOffsets` record is snapshotted and written, and while the file
    /// is started over, so a record of the old file never lands on the new one. Taken after `persistLock`.
    private let writtenLock = PlainLock()

    /// Where the download's checkpoints are kept: emptied before the file starts over (`reset`).
    private let store: CheckpointStore?

    /// What the download's mirrors are pinned to, for each checkpoint (nil: one URL).
    private let mirrorPins: (@Sendable () -> MirrorPins)?

    init(fd: Int32, partPath: String, url: URL, checkpoint: DownloadCheckpoint, limiter: BandwidthLimiter? = nil,
         store: CheckpointStore? = nil, mirrorPins: (@Sendable () -> MirrorPins)? = nil) {
        self.mirrorPins = mirrorPins
        self.limiter = limiter
        self.store = store
        self.fd = fd
        self.partPath = partPath
        self.url = url
        tag = Locked((checkpoint.fileTag, nil))
        fields = Locked(Fields(plan: checkpoint.plan, durable: checkpoint.durable ?? checkpoint.plan, validators: checkpoint.validators,
                               rangesSupported: checkpoint.rangesSupported,
                               furthest: max(checkpoint.furthest ?? 0, checkpoint.plan.bytesWritten),
                               restarts: checkpoint.restarts ?? 0,
                               writtenID: checkpoint.writtenID ?? WrittenOffsets.newID()))
    }

    /// Starts over from nothing because the remote file changed: the furthest offset is
    /// forgotten (the new version has none) and the change is counted.
    /// - Returns: the changes counted so far, over every run.
    @discardableResult
    func noteRemoteChanged() -> Int {
        fields.withLock {
            $0.furthest = 0
            $0.restarts += 1
            return $0.restarts
        }
    }

    var restarts: Int { fields.withLock { $0.restarts } }

    /// See `Fields.furthest`.
    var furthest: Int64 { fields.withLock { $0.furthest } }


    var plan: SegmentPlan { fields.withLock { $0.plan } }
    var validators: ResponseValidators { fields.withLock { $0.validators } }
    var rangesSupported: Bool { fields.withLock { $0.rangesSupported } }
    var bytesReceived: Int64 { fields.withLock { $0.bytesReceived } }

    func segment(_ index: Int) -> SegmentPlan.Segment { fields.withLock { $0.plan.segments[index] } }

    /// Tags the file with `tag` when the first checkpoint is saved (`checkpoint()`), not now.
    func tagWhenSaved(_ tagging: @escaping () -> PartFile.Tagging) {
        tag.withLock { $0.pending = tagging }
    }

    /// Tags the file now if `tagWhenSaved` set a tag to come (tried again at each checkpoint
    /// should it fail now).
    func tagNow() { _ = currentTag() }

    /// The file's tag, tagging it first if that waits for a checkpoint.
    private func currentTag() -> String? {
        tag.withLock { tag in
            if let pending = tag.pending {
                let done = pending()
                tag.current = done.tag
                // Set, or never to be: nothing more to do. Failed for now: the next checkpoint tries
                // again, and this one names no tag (judged by size, as on a file system without them).
                if done != .failed { tag.pending = nil }
            }
            return tag.current
        }
    }

    /// The checkpoint to save now. A file not yet tagged is tagged first: no saved checkpoint
    /// names a file that does not carry its tag.
    func checkpoint() -> DownloadCheckpoint {
        let tag = currentTag()
        return fields.withLock {
            var checkpoint = DownloadCheckpoint(url: url.absoluteString, validators: $0.validators, plan: $0.plan,
                                                rangesSupported: $0.rangesSupported)
            checkpoint.furthest = $0.furthest
            checkpoint.restarts = $0.restarts
            checkpoint.writtenID = $0.writtenID
            checkpoint.fileTag = tag
            checkpoint.mirrors = mirrorPins?()
            if $0.durable != $0.plan {
                checkpoint.durable = $0.durable
                checkpoint.bootID = BootID.current
            }
            return checkpoint
        }
    }

    /// A sync of the partial file that failed. Sticky: Linux reports a writeback error once and
    /// may drop the pages it could not write, so a later sync can succeed over lost bytes; every
    /// later write, checkpoint and the final sync fail with it instead.
    var syncFailure: POSIXFailure? { fields.withLock { $0.syncFailure } }

    /// Records a failed sync; only the bytes synced before it count from now on (`durableOnly`).
    func noteSyncFailed(_ failure: POSIXFailure) {
        writtenLock.lock()
        defer { writtenLock.unlock() }
        let recorded = fields.withLock { fields -> Bool in
            fields.syncFailure = fields.syncFailure ?? failure
            return fields.writtenRecorded
        }
        // The record counts bytes the page cache may have dropped (the checkpoint saved next keeps
        // only the synced ones and names no incarnation, so a record left behind is not trusted either).
        if recorded { WrittenOffsets.remove(fd: fd) }
    }

    /// The bytes of `plan` (a snapshot taken before a sync) are on stable storage.
    func markDurable(_ plan: SegmentPlan) {
        fields.withLock {
            $0.durable = plan
            $0.sinceSync = 0
        }
    }

    func recordWritten(_ count: Int64, segment index: Int) {
        var record = false
        let due = fields.withLock { fields -> (checkpoint: Bool, sync: Bool) in
            fields.plan.recordWritten(count, segment: index)
            fields.sinceCheckpoint += count
            fields.sinceSync += count
            fields.furthest = max(fields.furthest, fields.plan.bytesWritten)
            if let every = fields.writtenRecordEvery {
                fields.sinceWrittenRecord += count
                if fields.sinceWrittenRecord >= every {
                    fields.sinceWrittenRecord = 0
                    record = true
                }
            }
            // A finished segment needs no checkpoint of its own: the file is about to be finalised or
            // another checkpoint will carry it.
            guard !fields.plan.segments[index].isComplete else { return (false, false) }
            let sync = fields.syncEvery.map { fields.sinceSync >= $0 } ?? false
            return (sync || (fields.checkpointEvery.map { fields.sinceCheckpoint >= $0 } ?? false), sync)
        }
        guard record || due.checkpoint else { return }
        let writers = self.writers.current
        if record { writers.written?.request(sync: false) }
        if due.checkpoint { writers.persist?(due.sync) }
    }

    /// Writes the file's own record of how far each segment is written (on `writtenWriter`'s queue).
    /// None after a failed sync: the page cache may have dropped bytes the plan counts.
    func recordWrittenOffsets() {
        writtenLock.lock()
        defer { writtenLock.unlock() }
        guard let boot = BootID.current else { return }
        let record = fields.withLock { fields -> WrittenOffsets? in
            guard fields.syncFailure == nil else { return nil }
            fields.writtenRecorded = true
            return WrittenOffsets(id: fields.writtenID, bootID: boot, plan: fields.plan)
        }
        record?.write(fd: fd)
    }

    /// The file was found carrying a `WrittenOffsets` record (removed once it is complete).
    func noteWrittenRecordFound() {
        fields.withLock { $0.writtenRecorded = true }
    }

    /// Removes the file's `WrittenOffsets` record once the file is complete; waits for one being written.
    func removeWrittenRecord() {
        writers.current.written?.drain()
        writtenLock.lock()
        defer { writtenLock.unlock() }
        let recorded = fields.withLock { fields -> Bool in
            defer { fields.writtenRecorded = false }
            return fields.writtenRecorded
        }
        if recorded { WrittenOffsets.remove(fd: fd) }
    }

    /// Waits for every checkpoint and written-offsets record asked for so far.
    func drainWriters() {
        let writers = self.writers.current
        writers.written?.drain()
        writers.checkpoint?.drain()
    }

    /// Called by a checkpoint as it takes its snapshot.
    func checkpointTaken() {
        fields.withLock { $0.sinceCheckpoint = 0 }
    }

    func recordReceived(_ count: Int) {
        fields.withLock { $0.bytesReceived += Int64(count) }
    }

    func finishOpenSegment(_ index: Int) {
        fields.withLock { $0.plan.finishOpenSegment(index) }
    }

    /// A fresh full response (200 to a request without Range): remember what it says.
    func adoptFullResponse(validators: ResponseValidators, size: Int64?, rangesSupported: Bool) {
        fields.withLock {
            $0.validators = validators
            $0.rangesSupported = rangesSupported
            if let size { $0.plan.learnTotalSize(size) }
        }
    }

    /// A 206 told the size of a plan that did not know it.
    func learnTotalSize(_ size: Int64) {
        fields.withLock { $0.plan.learnTotalSize(size) }
    }

    /// Starts the file over from byte 0 with a new plan (a changed remote, or a
    /// server that ignores ranges). The bytes already written are discarded.
    func reset(plan: SegmentPlan, validators: ResponseValidators, rangesSupported: Bool) throws {
        persistLock.lock()
        defer { persistLock.unlock() }
        writtenLock.lock()
        defer { writtenLock.unlock() }
        // The saved checkpoint claims the old bytes: forgotten first, or a process killed after the
        // truncation and before the next checkpoint would leave a record the next run trusts, and
        // where the new bytes stop short of its claim the file would keep zeros. A store that
        // refuses (a shared store gave the job to another worker) stops the download here.
        try store?.removeBeforeStartingOver()
        // Removed before the truncation: a process killed between the two leaves a checkpoint of
        // the old incarnation, which a record of that incarnation would extend over new bytes.
        if fields.withLock({ $0.writtenRecorded }) { WrittenOffsets.remove(fd: fd) }
        try fields.withLock {
            guard ftruncate(fd, 0) == 0 else { throw POSIXFailure(operation: "truncate", path: partPath) }
            // A new incarnation: a record of the old one no longer describes the file.
            $0.writtenID = WrittenOffsets.newID()
            $0.sinceWrittenRecord = 0
            $0.requests = [:]
            $0.plan = plan
            $0.durable = plan
            $0.validators = validators
            $0.rangesSupported = rangesSupported
            // The old version's checksum is not the new one's.
            $0.published = nil
            // The truncation freed the blocks reserved for the old plan.
            $0.reserved = 0
        }
    }

    /// Marks `ranges` of a complete file to be fetched again (they failed a checksum), keeping the
    /// rest. The file is synced first: the checkpoint then claims the kept bytes as durable.
    func refetch(_ ranges: [Range<Int64>]) throws {
        persistLock.lock()
        defer { persistLock.unlock() }
        writtenLock.lock()
        defer { writtenLock.unlock() }
        guard fsync(fd) == 0 else { throw POSIXFailure(operation: "sync", path: partPath) }
        if fields.withLock({ $0.writtenRecorded }) { WrittenOffsets.remove(fd: fd) }
        fields.withLock {
            $0.writtenID = WrittenOffsets.newID()
            $0.sinceWrittenRecord = 0
            $0.requests = [:]
            $0.plan = $0.plan.refetching(ranges)
            $0.durable = $0.plan
        }
    }

    /// Reserves disk space once the total size is known (see `Preallocation`).
    func reserveSpaceIfKnown() throws {
        try fields.withLock {
            guard let total = $0.plan.totalSize, total != $0.reserved else { return }
            try Preallocation.reserve(fd: fd, length: total, path: partPath)
            $0.reserved = total
        }
    }

    /// Gives back space reserved and not written (the download stops short of its size): past
    /// the file's end, and between segments. Called once the writers are drained, so each
    /// segment's `written` is all there is of it (bytes past it would be fetched again anyway).
    func releaseReservation() {
        fields.withLock {
            guard $0.reserved > 0 else { return }
            let gaps = $0.plan.segments.compactMap { segment -> Range<Int64>? in
                guard let end = segment.end, segment.start + segment.written < end else { return nil }
                return (segment.start + segment.written)..<end
            }
            Preallocation.release(fd: fd, unwritten: gaps)
            $0.reserved = 0
        }
    }

    /// Gives an idle connection half of the largest remaining segment, never what a
    /// connection has already asked for; returns its index.
    func stealWork(minSegmentSize: Int64) -> Int? {
        let now = DispatchTime.now().uptimeNanoseconds
        return fields.withLock {
            let requests = $0.requests.mapValues {
                SegmentPlan.Request(end: $0.end, from: $0.from, elapsed: Double(now &- $0.sent) / 1e9)
            }
            return $0.plan.splitLargestRemainder(minSegmentSize: minSegmentSize, requests: requests)
        }
    }

    /// Starts an exchange of segment `index`: `body` gets the segment as it stands, whether the
    /// plan is segmented and whether ranges work, and returns what the request asks for. The
    /// range's end (exclusive) is recorded in the same locked step, so a split made for an idle
    /// connection sees it and cuts into it only when the connection is slow (`endExchange` forgets it).
    /// - Returns: `body`'s value, and when the exchange began (`DispatchTime` nanoseconds).
    func beginExchange<T>(_ index: Int,
                          _ body: (SegmentPlan.Segment, _ segmented: Bool, _ rangesSupported: Bool) -> (T, requestedEnd: Int64?))
        -> (T, began: UInt64) {
        fields.withLock {
            let segment = $0.plan.segments[index]
            let (value, end) = body(segment, $0.plan.isSegmented, $0.rangesSupported)
            let began = DispatchTime.now().uptimeNanoseconds
            $0.requests[index] = end.map { ($0, segment.offset, began) }
            return (value, began)
        }
    }

    /// The exchange of segment `index` ended (see `beginExchange`).
    func endExchange(_ index: Int) {
        fields.withLock { _ = $0.requests.removeValue(forKey: index) }
    }

    /// Replaces the plan (after a probe, or after splitting for an idle connection).
    func update(_ body: (inout SegmentPlan) -> Void) {
        fields.withLock { body(&$0.plan) }
    }

    /// The checksum the server published for this version, checked when the file is complete.
    var published: PublishedChecksum? { fields.withLock { $0.published } }

    /// An accepted answer's published checksum: the first one of this incarnation of the file is kept.
    func notePublished(_ checksum: PublishedChecksum?) {
        guard let checksum else { return }
        fields.withLock { if $0.published == nil { $0.published = checksum } }
    }

    func setValidators(_ validators: ResponseValidators, rangesSupported: Bool) {
        fields.withLock {
            $0.validators = validators
            $0.rangesSupported = rangesSupported
        }
    }
}

/// Errors that steer the engine rather than end the download.
enum DownloadSignal: Error {
    /// The segment reached its (possibly moved) end: stop reading, it is done.
    case segmentSatisfied
    /// The remote version changed or the server ignored a range: start over from zero.
    case restart(reason: String)
    /// The server's answers to ranges cannot be trusted (`ResponseDecision.Verdict.withoutRange`):
    /// start over from zero with one request for the whole file, and ask no range again.
    case withoutRange(reason: String)
    /// The complete file failed a checksum: fetch these ranges again (from another mirror).
    case refetch([Range<Int64>], reason: String)
}

/// An error status from the server, with what the body said about it.
struct HTTPStatusFailure: Error {
    var status: Int
    var retryAfter: RetryAfter?
    var message: String
}
