import CSystem
import Foundation

/// The names of a download's own files beside its destination, and the rule that keeps them
/// apart from every destination and every user file.
///
/// `NAME.transferd-part` holds the bytes as they arrive and `NAME.transferd-part.state` the
/// checkpoint (replaced through `NAME.transferd-part.state.PID.N.tmp`). No destination may have
/// a file name holding `.transferd-part` — not a job file's `dest`, not `-o`, not a name taken
/// from a URL, not an S3 key — so one download's partial file is never another's destination
/// (`X` and `X.part` used to share `X.part`), and a user's `report.part` is just a file.
///
/// Earlier versions wrote `NAME.part` and `NAME.part.state`. Such a pair is taken over under the
/// new names when its download runs again (`adoptEarlierPartial`), and only when the partial file
/// provably is transferd's (it carries the tag its checkpoint names); anything else is left alone.
package enum PartialNames {
    /// What every name of transferd's own beside a destination holds.
    package static let marker = ".transferd-part"

    /// Where the bytes of a download to `destination` are written until they are complete.
    package static func part(of destination: String) -> String { destination + marker }

    /// The checkpoint of a download to `destination`.
    package static func state(of destination: String) -> String { destination + marker + ".state" }

    /// The names earlier versions gave the partial file and its checkpoint.
    static func earlierPart(of destination: String) -> String { destination + ".part" }
    static func earlierState(of destination: String) -> String { destination + ".part.state" }

    /// The longest file name a destination may have, in bytes: 255, the limit of Linux's file
    /// systems, less what its checkpoint's temporary file adds (`.transferd-part.state` and
    /// `.PID.RANDOM.tmp`, at most 23 bytes).
    package static let longestName = 255 - (marker + ".state").utf8.count - ".4194304.4294967295.tmp".utf8.count

    /// Why `path` cannot be a destination because of its file name, or nil when it can.
    /// Byte-wise, like the rest of transferd's path handling.
    package static func refusal(of path: String) -> String? {
        let name = path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).last.map(Array.init) ?? []
        if contains(name, markerBytes) {
            return "its file name holds \(marker), which transferd keeps for its partial files"
        }
        if name.count > longestName {
            return "its file name is \(name.count) bytes, over the \(longestName) transferd can give a file while it downloads"
        }
        return nil
    }

    /// Whether a file name holds `marker` (is one of transferd's partial files or checkpoints).
    static func holdsMarker(_ name: String) -> Bool { contains(Array(name.utf8), markerBytes) }

    private static let markerBytes = Array(marker.utf8)

    private static func contains(_ bytes: [UInt8], _ pattern: [UInt8]) -> Bool {
        guard bytes.count >= pattern.count else { return false }
        return (0...(bytes.count - pattern.count)).contains { bytes[$0..<($0 + pattern.count)].elementsEqual(pattern) }
    }

    /// What to do with an earlier version's partial file, as a pure decision over what is known
    /// of the files. It is taken over only when nothing is at the new names yet, its checkpoint
    /// decodes as one of transferd's and the file carries the tag the checkpoint names (or the
    /// file system keeps no tags and the checkpoint names none, as such a version wrote it).
    enum Adoption: Equatable {
        case adopt
        case leave
    }

    static func adoption(newFilesExist: Bool, earlierPartIsRegularFile: Bool, checkpointTag: String??,
                         fileTag: String?, fileSystemKeepsTags: Bool) -> Adoption {
        guard !newFilesExist, earlierPartIsRegularFile, let checkpointTag else { return .leave }
        switch (checkpointTag, fileTag) {
        case (let wanted?, let carried?): return wanted == carried ? .adopt : .leave
        case (nil, _): return fileSystemKeepsTags ? .leave : .adopt
        case (_?, nil): return .leave
        }
    }

    /// Renames an earlier version's partial file to the new name when `adoption` says so, with
    /// its checkpoint file when `store` keeps checkpoints in files (a queue keeps them in the
    /// job's row, which names the same tag). The file first, so a crash between the two leaves a
    /// tagged file without a checkpoint, which the download starts over. The earlier file is
    /// locked while it moves; one another process holds (an earlier version still writing it) is
    /// left alone. Returns whether the file was taken over.
    @discardableResult
    static func adoptEarlierPartial(of destination: String, store: CheckpointStore) -> Bool {
        let part = part(of: destination), state = state(of: destination)
        let earlierPart = earlierPart(of: destination), earlierState = earlierState(of: destination)
        let inFiles = store is FileCheckpointStore
        var info = stat()
        guard lstat(earlierPart, &info) == 0, !inFiles || lstat(earlierState, &info) == 0 else { return false }
        let newFilesExist = lstat(part, &info) == 0 || (inFiles && lstat(state, &info) == 0)
        guard !newFilesExist, let file = try? PartFile.lockExisting(earlierPart, takingOver: false) else { return false }
        defer { file.close() }
        let checkpoint = inFiles ? try? FileCheckpointStore(path: earlierState).load() : try? store.load()
        let isRegular = lstat(earlierPart, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
        let decision = adoption(newFilesExist: newFilesExist, earlierPartIsRegularFile: isRegular,
                                checkpointTag: checkpoint.map { $0.fileTag }, fileTag: file.currentTag(),
                                fileSystemKeepsTags: file.carriesAnyTag() != nil)
        guard decision == .adopt, PartFile.names(file.fd, earlierPart), rename(earlierPart, part) == 0 else { return false }
        if inFiles { _ = rename(earlierState, state) }
        AtomicFile.syncDirectory(of: part)
        return true
    }

    /// The partial file a finishing queue job puts in place: the new name, or an earlier
    /// version's `NAME.part` when only that is there and it carries transferd's tag (a finished
    /// download keeps it until it is in place).
    static func finishingPart(of destination: String) -> String {
        let part = part(of: destination), earlier = earlierPart(of: destination)
        var info = stat(), buffer = [UInt8](repeating: 0, count: 64)
        guard lstat(part, &info) != 0, lstat(earlier, &info) == 0, info.st_mode & S_IFMT == S_IFREG,
              lgetxattr(earlier, PartFile.tagAttribute, &buffer, buffer.count) > 0 else { return part }
        return earlier
    }
}
