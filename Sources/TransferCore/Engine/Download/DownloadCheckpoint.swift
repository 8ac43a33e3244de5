import Foundation

/// Everything needed to resume a download, in any later process: which remote
/// version the partial file holds and which of its bytes are on disk.
package struct DownloadCheckpoint: Codable, Equatable, Sendable {
    package static let currentVersion = 1

    package var version: Int
    package var url: String
    package var validators: ResponseValidators
    package var plan: SegmentPlan
    /// False once the server showed it ignores Range requests.
    package var rangesSupported: Bool
    /// The most bytes this download ever had on disk (see the retry budget in
    /// `RetryPolicy`); absent in checkpoints from before it was kept.
    package var furthest: Int64?
    /// Times the download started over because the remote file changed, over
    /// every run (a server must not reset the retry budget by changing its ETag).
    package var restarts: Int?
    /// The bytes of `plan` known to be on stable storage, when fewer than
    /// `plan`'s: the rest were written (to the page cache) but not yet synced.
    /// Absent: every byte of `plan` is durable.
    package var durable: SegmentPlan?
    /// The boot (`BootID`) in which `plan`'s unsynced bytes were written. A
    /// killed process leaves them in the page cache, so the same boot may read
    /// them back; after a crash of the machine only `durable` counts.
    package var bootID: String?
    /// Which incarnation of the partial file this checkpoint describes: new
    /// whenever the file starts over. The file's own record of how far it is
    /// written (`WrittenOffsets`) counts only beside a checkpoint of the same one.
    package var writtenID: String?
    /// The partial file's tag (an extended attribute, `user.transferd.file`, set when the file
    /// was created or started over): a checkpoint that names one is trusted only for a file that
    /// carries it, so another file put at the partial file's name since, even one of the same size, is started
    /// over. Absent in checkpoints from before it was kept, and where the file system keeps no
    /// user attributes: then only the file's size is checked.
    package var fileTag: String?
    /// A download from several mirrors: the version each served (`MirrorSet.pins`).
    package var mirrors: MirrorPins?

    /// What a new run may resume from in the boot `current`: all of `plan` in
    /// the boot that wrote it, else only its durable bytes. `durable` stays
    /// what is known synced.
    package func trusted(inBoot current: String?) -> DownloadCheckpoint {
        guard durable != nil, bootID == nil || bootID != current else { return self }
        return durableOnly
    }

    /// The checkpoint with only its durable bytes: after a machine's crash, or a failed sync.
    package var durableOnly: DownloadCheckpoint {
        guard let durable else { return self }
        var result = self
        result.bootID = nil
        result.plan = durable
        result.durable = nil
        // The file's own record may claim bytes the page cache lost: only the durable ones count.
        result.writtenID = nil
        // Bytes lost with the page cache are fetched again without counting as progress
        // otherwise (the retry budget's furthest offset came from the untrusted plan).
        result.furthest = furthest.map { min($0, durable.bytesWritten) }
        return result
    }

    /// This checkpoint with the bytes the partial file's own record adds (see
    /// `WrittenOffsets.extending`) in the boot `bootID`, of a file of
    /// `fileSize` bytes. The bytes it adds are not durable.
    package func extended(by record: WrittenOffsets, bootID current: String?, fileSize: Int64) -> DownloadCheckpoint {
        let extended = record.extending(plan, id: writtenID, bootID: current, fileSize: fileSize)
        guard extended != plan else { return self }
        var result = self
        result.durable = durable ?? plan
        result.bootID = current
        result.plan = extended
        return result
    }

    /// Where a run resumes on its open partial file `fd`: this checkpoint (already trusted for
    /// the boot) raised by the file's own record of how far it is written, and whether the file
    /// had such a record.
    package func resumed(onFile fd: Int32, bootID current: String?) -> (checkpoint: DownloadCheckpoint, hadRecord: Bool) {
        guard let record = WrittenOffsets.read(fd: fd) else { return (self, false) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return (self, true) }
        return (extended(by: record, bootID: current, fileSize: Int64(info.st_size)), true)
    }

    /// Whether its plans can describe a file at all (see `SegmentPlan.isCoherent`). A checkpoint
    /// is read back from a file or a database row anyone with access may have edited: one that
    /// is not coherent is not trusted, and the download starts over.
    var isCoherent: Bool { plan.isCoherent && (durable?.isCoherent ?? true) }

    package init(url: String, validators: ResponseValidators, plan: SegmentPlan, rangesSupported: Bool) {
        self.version = Self.currentVersion
        self.url = url
        self.validators = validators
        self.plan = plan
        self.rangesSupported = rangesSupported
    }
}

/// Where checkpoints live. A checkpoint's `plan` may claim bytes not yet
/// synced only with `durable` and `bootID` set (see `trusted(inBoot:)`).
package protocol CheckpointStore: Sendable {
    func load() throws -> DownloadCheckpoint?
    func save(_ checkpoint: DownloadCheckpoint) throws
    func remove() throws
    /// Removes the checkpoint before a running download truncates its partial
    /// file to start over: the removal must be as lasting as the truncation,
    /// or a killed process (or a crashed machine) leaves a checkpoint claiming
    /// bytes the file no longer has, and the next run keeps zeros in their place.
    func removeBeforeStartingOver() throws
}

extension CheckpointStore {
    package func removeBeforeStartingOver() throws { try remove() }
}

/// A checkpoint kept as JSON beside the partial file (`NAME.transferd-part.state`, `PartialNames`),
/// replaced atomically (write temp, fsync, rename), like aria2's control file.
/// One that claims unsynced bytes is not fsynced itself: it is trusted only in
/// the boot that wrote it, whose page cache holds it anyway (after a crash the
/// file holds it or the one before it; where a filesystem does not order a
/// rename after the data, an empty file, and the download starts over).
package struct FileCheckpointStore: CheckpointStore {
    package let path: String

    package init(path: String) { self.path = path }

    package func load() throws -> DownloadCheckpoint? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        guard let checkpoint = try? JSONDecoder().decode(DownloadCheckpoint.self, from: data),
              checkpoint.version == DownloadCheckpoint.currentVersion else {
            return nil // unreadable or from another version: start over rather than guess
        }
        return checkpoint
    }

    package func save(_ checkpoint: DownloadCheckpoint) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(checkpoint)
        try AtomicFile.write(data, to: path, sync: checkpoint.durable == nil)
    }

    package func remove() throws {
        if unlink(path) != 0 && errno != ENOENT { throw POSIXFailure(operation: "remove", path: path) }
    }

    /// Whether a file at `path` is something other than a record of transferd's (a JSON object
    /// with a URL and a plan, of any version): such a file is never replaced or removed.
    var holdsForeignFile: Bool {
        var info = stat()
        guard lstat(path, &info) == 0 else { return false }
        guard (info.st_mode & S_IFMT) == S_IFREG, info.st_size < 16 << 20,
              let data = FileManager.default.contents(atPath: path),
              let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return true }
        return object["url"] == nil || object["plan"] == nil
    }

    /// The removal is synced (the folder) before the truncation that follows it: a file system
    /// that does not order the two could otherwise keep the truncation and lose the removal.
    package func removeBeforeStartingOver() throws {
        try remove()
        AtomicFile.syncDirectory(of: path)
    }
}

/// Writes that either fully happen or not at all.
enum AtomicFile {
    static func write(_ data: Data, to path: String, sync: Bool = true) throws {
        let temporary = path + ".\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        // Owner only: a checkpoint names the URL, which may carry a token.
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw POSIXFailure(operation: "create", path: temporary) }
        let written = data.withUnsafeBytes { Foundation.write(fd, $0.baseAddress, $0.count) }
        guard written == data.count, !sync || fsync(fd) == 0 else {
            let failure = POSIXFailure(operation: "write", path: temporary)
            close(fd)
            unlink(temporary)
            throw failure
        }
        close(fd)
        guard rename(temporary, path) == 0 else { throw POSIXFailure(operation: "rename", path: path) }
    }

    /// fsyncs a directory so a rename inside it survives a crash.
    static func syncDirectory(of path: String) {
        let directory = PathText.parent(path)
        let fd = open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }
}
