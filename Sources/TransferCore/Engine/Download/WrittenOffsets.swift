import CSystem
import Foundation

/// How far each segment of a partial file is written, recorded on the file
/// itself (an extended attribute, `user.transferd.written`) about every MiB.
///
/// A checkpoint is a whole record, replaced by a rename, and ext4 makes a
/// rename over another file wait for the disk's queue (`auto_da_alloc`): at
/// full speed the saved checkpoint trails the file by several MiB, which a
/// `kill -9` then fetches again. Setting an attribute takes 8 µs (43 µs at
/// the 99th percentile, 106 µs at most, measured here while `dd` filled the
/// disk's queue), so this record trails by about a MiB at any speed.
///
/// It is trusted only beside the checkpoint it belongs to: the same
/// incarnation of the partial file (`id`, new whenever the file starts over,
/// kept in the checkpoint too) and the same boot (the bytes it claims may sit
/// unsynced in the page cache, which a killed process leaves behind but a
/// crash of the machine does not). It only ever adds bytes to a checkpoint's
/// segments, never segments, and never claims more than the file holds.
package struct WrittenOffsets: Equatable, Sendable {
    static let attribute = "user.transferd.written"

    package struct Segment: Equatable, Sendable {
        var start: Int64
        var written: Int64
    }

    /// The partial file's incarnation (`DownloadCheckpoint.writtenID`).
    var id: String
    var bootID: String
    var segments: [Segment]

    init(id: String, bootID: String, plan: SegmentPlan) {
        self.id = id
        self.bootID = bootID
        segments = plan.segments.map { Segment(start: $0.start, written: $0.written) }
    }

    /// Text for the attribute: `1`, the id, the boot, then `start:written` per segment, one per line.
    var encoded: String {
        (["1", id, bootID] + segments.map { "\($0.start):\($0.written)" }).joined(separator: "\n")
    }

    /// Reads `encoded`; nil for anything this type did not write.
    init?(encoded text: String) {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count >= 3, lines[0] == "1", !lines[1].isEmpty, !lines[2].isEmpty else { return nil }
        id = String(lines[1])
        bootID = String(lines[2])
        var segments: [Segment] = []
        for line in lines.dropFirst(3) {
            let parts = line.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 2, let start = Int64(parts[0]), let written = Int64(parts[1]),
                  start >= 0, written >= 0, start <= Int64.max - written else { return nil }
            segments.append(Segment(start: start, written: written))
        }
        self.segments = segments
    }

    /// `plan` with each segment's written bytes raised to what this record
    /// claims for the segment of the same index and start, capped at the
    /// segment's end and at `fileSize` (what the file holds). A record of
    /// another incarnation or boot changes nothing.
    func extending(_ plan: SegmentPlan, id expectedID: String?, bootID currentBoot: String?, fileSize: Int64) -> SegmentPlan {
        guard let expectedID, id == expectedID, let currentBoot, bootID == currentBoot else { return plan }
        var segments = plan.segments
        for index in segments.indices where index < self.segments.count {
            let claim = self.segments[index]
            var segment = segments[index]
            // (A checkpoint is read from disk too: its numbers are checked before any arithmetic.)
            guard claim.start == segment.start, segment.start >= 0, segment.start <= fileSize, !segment.finished,
                  claim.written > segment.written else { continue }
            var written = min(claim.written, fileSize - segment.start)
            if let end = segment.end {
                guard end >= segment.start else { continue }
                written = min(written, end - segment.start)
            }
            segment.written = max(segment.written, written)
            segments[index] = segment
        }
        return SegmentPlan(segments: segments, totalSize: plan.totalSize)
    }

    // MARK: The attribute

    /// The record on the open file `fd`, if there is a readable one.
    package static func read(fd: Int32) -> WrittenOffsets? {
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        let count = fgetxattr(fd, attribute, &buffer, buffer.count)
        guard count > 0 else { return nil }
        return WrittenOffsets(encoded: String(decoding: buffer[0..<count], as: UTF8.self))
    }

    /// Records this on `fd`. Best effort: a file system without user attributes
    /// (or a plan too large for one) keeps none, and resuming falls back on the checkpoint.
    func write(fd: Int32) {
        let bytes = Array(encoded.utf8)
        _ = fsetxattr(fd, Self.attribute, bytes, bytes.count, 0)
    }

    /// Removes the record from `fd` (the file is complete: the record has nothing left to say).
    static func remove(fd: Int32) {
        _ = fremovexattr(fd, attribute)
    }

    /// A new incarnation's id.
    static func newID() -> String {
        String(UInt64.random(in: 0...UInt64.max), radix: 36)
    }
}
