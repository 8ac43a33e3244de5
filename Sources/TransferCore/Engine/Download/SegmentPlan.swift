/// Which byte ranges of a download exist and how much of each is on disk.
///
/// A pure value: the engine records written bytes into it and snapshots it
/// into checkpoints. A segment covers `start..<end`; an open `end` (nil) means
/// "until the server stops", for a single stream of unknown length.
public struct SegmentPlan: Codable, Equatable, Sendable {
    public struct Segment: Codable, Equatable, Sendable {
        public var start: Int64
        public var end: Int64?
        /// Bytes from `start` that are written to the file.
        public var written: Int64
        /// Set for an open-ended segment once the server ended the body.
        public var finished: Bool

        public init(start: Int64, end: Int64?, written: Int64 = 0, finished: Bool = false) {
            self.start = start
            self.end = end
            self.written = written
            self.finished = finished
        }

        /// The next byte to fetch.
        public var offset: Int64 { start + written }
        public var remaining: Int64? { end.map { $0 - offset } }
        public var isComplete: Bool { finished || (end.map { offset >= $0 } ?? false) }
    }

    public private(set) var segments: [Segment]
    /// The whole file's size, when the server told it.
    public private(set) var totalSize: Int64?

    /// One stream from byte 0, size unknown or known.
    public static func single(totalSize: Int64?) -> SegmentPlan {
        SegmentPlan(segments: [Segment(start: 0, end: totalSize)], totalSize: totalSize)
    }

    /// Splits `totalSize` into up to `connections` segments of at least `minSegmentSize` bytes.
    public static func split(totalSize: Int64, connections: Int, minSegmentSize: Int64) -> SegmentPlan {
        let bySize = max(1, totalSize / max(1, minSegmentSize))
        let count = Int(max(1, min(Int64(max(1, connections)), bySize)))
        let base = totalSize / Int64(count)
        var segments: [Segment] = []
        var start: Int64 = 0
        for index in 0..<count {
            let end = index == count - 1 ? totalSize : start + base
            segments.append(Segment(start: start, end: end))
            start = end
        }
        return SegmentPlan(segments: segments, totalSize: totalSize)
    }

    /// Keeps what a single stream has written as one finished segment and
    /// splits the rest of the file over `connections` new segments.
    public mutating func splitRemainder(connections: Int, minSegmentSize: Int64) {
        guard segments.count == 1, let total = totalSize, segments[0].offset < total else { return }
        let done = segments[0].offset
        let rest = SegmentPlan.split(totalSize: total - done, connections: connections, minSegmentSize: minSegmentSize)
        segments[0].end = done
        segments += rest.segments.map { Segment(start: $0.start + done, end: $0.end.map { $0 + done }) }
    }

    public init(segments: [Segment], totalSize: Int64?) {
        self.segments = segments
        self.totalSize = totalSize
    }

    public var isComplete: Bool { segments.allSatisfy(\.isComplete) }
    public var bytesWritten: Int64 { segments.reduce(0) { $0 + $1.written } }
    public var isSegmented: Bool { segments.count > 1 }

    /// Records `count` more bytes written at the end of segment `index`.
    public mutating func recordWritten(_ count: Int64, segment index: Int) {
        segments[index].written += count
    }

    /// The server ended an open-ended segment's body: the file's size is now known.
    public mutating func finishOpenSegment(_ index: Int) {
        segments[index].finished = true
        if segments.count == 1 { totalSize = segments[index].offset }
    }

    /// The server announced the size for a single stream that did not know it.
    public mutating func learnTotalSize(_ size: Int64) {
        totalSize = size
        if segments.count == 1 && segments[0].end == nil { segments[0].end = size }
    }

    /// Splits the largest unfinished remainder in two and returns the new
    /// segment's index, so an idle connection can take half of a slow one's
    /// work (aria2's segment stealing). The running owner of the original
    /// segment stops at its new end. Returns nil when nothing is worth splitting.
    public mutating func splitLargestRemainder(minSegmentSize: Int64) -> Int? {
        let candidates = segments.indices.filter { (segments[$0].remaining ?? 0) >= 2 * minSegmentSize }
        guard let largest = candidates.max(by: { segments[$0].remaining! < segments[$1].remaining! }) else {
            return nil
        }
        let segment = segments[largest]
        let middle = segment.offset + segment.remaining! / 2
        segments[largest].end = middle
        segments.append(Segment(start: middle, end: segment.end))
        return segments.count - 1
    }
}
