/// Which byte ranges of a download exist and how much of each is on disk.
///
/// A pure value: the engine records written bytes into it and snapshots it
/// into checkpoints. A segment covers `start..<end`; an open `end` (nil) means
/// "until the server stops", for a single stream of unknown length.
package struct SegmentPlan: Codable, Equatable, Sendable {
    package struct Segment: Codable, Equatable, Sendable {
        package var start: Int64
        package var end: Int64?
        /// Bytes from `start` that are written to the file.
        package var written: Int64
        /// Set for an open-ended segment once the server ended the body.
        package var finished: Bool

        package init(start: Int64, end: Int64?, written: Int64 = 0, finished: Bool = false) {
            self.start = start
            self.end = end
            self.written = written
            self.finished = finished
        }

        /// The next byte to fetch.
        package var offset: Int64 { start + written }
        package var remaining: Int64? { end.map { $0 - offset } }
        /// Whether its remainder is large enough to split in two of at least `minSegmentSize`.
        func isSplittable(minSegmentSize: Int64) -> Bool { (remaining ?? 0) >= 2 * minSegmentSize }
        package var isComplete: Bool { finished || (end.map { offset >= $0 } ?? false) }
    }

    package private(set) var segments: [Segment]
    /// The whole file's size, when the server told it.
    package private(set) var totalSize: Int64?

    /// One stream from byte 0, size unknown or known.
    package static func single(totalSize: Int64?) -> SegmentPlan {
        SegmentPlan(segments: [Segment(start: 0, end: totalSize)], totalSize: totalSize)
    }

    /// Splits `totalSize` into up to `connections` segments of at least `minSegmentSize` bytes.
    package static func split(totalSize: Int64, connections: Int, minSegmentSize: Int64) -> SegmentPlan {
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
    package mutating func splitRemainder(connections: Int, minSegmentSize: Int64) {
        guard segments.count == 1, let total = totalSize, segments[0].offset < total else { return }
        let done = segments[0].offset
        let rest = SegmentPlan.split(totalSize: total - done, connections: connections, minSegmentSize: minSegmentSize)
        segments[0].end = done
        segments += rest.segments.map { Segment(start: $0.start + done, end: $0.end.map { $0 + done }) }
    }

    package init(segments: [Segment], totalSize: Int64?) {
        self.segments = segments
        self.totalSize = totalSize
    }

    /// Whether the plan can describe a file: segments that tile it from byte 0 without gap or
    /// overlap (in any order: splits are appended), written counts within their segments, an
    /// open end only for a single stream, and the total size where the last segment ends. None
    /// of its sums can then overflow: every offset is at most the last end.
    var isCoherent: Bool {
        let ordered = segments.sorted { $0.start < $1.start }
        guard let last = ordered.last else { return false }
        var next: Int64 = 0
        for segment in ordered {
            guard segment.start == next, segment.written >= 0 else { return false }
            if let end = segment.end {
                guard end >= segment.start, segment.written <= end - segment.start else { return false }
                next = end
            } else {
                guard ordered.count == 1, segment.written <= Int64.max - segment.start else { return false }
            }
        }
        guard let total = totalSize else { return true }
        if let end = last.end { return total == end }
        // A single stream that learned its size when the body ended.
        return last.finished && total == last.offset
    }

    /// The end of the furthest byte written in any segment: the partial file is at least this long.
    var writtenExtent: Int64 {
        segments.reduce(0) { $1.written > 0 ? max($0, $1.offset) : $0 }
    }

    package var isComplete: Bool { segments.allSatisfy(\.isComplete) }
    package var bytesWritten: Int64 { segments.reduce(0) { $0 + $1.written } }
    package var isSegmented: Bool { segments.count > 1 }

    /// Records `count` more bytes written at the end of segment `index`.
    package mutating func recordWritten(_ count: Int64, segment index: Int) {
        segments[index].written += count
    }

    /// The server ended an open-ended segment's body: the file's size is now known.
    package mutating func finishOpenSegment(_ index: Int) {
        segments[index].finished = true
        if segments.count == 1 { totalSize = segments[index].offset }
    }

    /// The server announced the size for a single stream that did not know it.
    package mutating func learnTotalSize(_ size: Int64) {
        totalSize = size
        if segments.count == 1 && segments[0].end == nil { segments[0].end = size }
    }

    /// What a connection is receiving for a segment: a bounded range ending at
    /// `end` (exclusive), asked for from `from`, `elapsed` seconds ago.
    package struct Request: Equatable, Sendable {
        package var end: Int64
        package var from: Int64
        package var elapsed: Double
        package init(end: Int64, from: Int64, elapsed: Double) {
            self.end = end
            self.from = from
            self.elapsed = elapsed
        }
    }

    /// Splits an unfinished remainder in two and returns the new segment's
    /// index, so an idle connection can take half of another's work (aria2's
    /// segment stealing). Returns nil when nothing is worth splitting.
    ///
    /// A cut inside a range a connection is receiving ends that response
    /// early: its connection closes and what was already on the way past the
    /// cut is thrown away (about 3 MiB of socket buffers on loopback; 24.9 MiB
    /// over the eight splits of a 1 GiB download when every request ran to its
    /// segment's end). So, given `requests` (segment index to the range its
    /// connection is receiving):
    /// - first choice, the cut goes at the middle of the remainder or at the
    ///   end of the range being received, whichever is later, on the segment
    ///   that then gives the most (at least `minSegmentSize`);
    /// - otherwise a connection too slow to finish its range within `patience`
    ///   seconds at the rate it has shown (a stall, a throttled path) is cut at
    ///   the middle of its remainder all the same, the largest first. One that
    ///   started less than a quarter of a second ago has shown no rate yet.
    /// A remainder under twice `minSegmentSize` is never split.
    package mutating func splitLargestRemainder(minSegmentSize: Int64, requests: [Int: Request] = [:],
                                               patience: Double = 1) -> Int? {
        var clean: (index: Int, cut: Int64, given: Int64)?
        var slow: (index: Int, cut: Int64, given: Int64)?
        for index in segments.indices {
            let segment = segments[index]
            guard segment.isSplittable(minSegmentSize: minSegmentSize), let end = segment.end,
                  let remaining = segment.remaining else { continue }
            let middle = segment.offset + remaining / 2
            let request = requests[index]
            let cut = max(middle, request?.end ?? segment.offset)
            if end - cut >= minSegmentSize {
                if end - cut > (clean?.given ?? 0) { clean = (index, cut, end - cut) }
            } else if let request, request.elapsed >= 0.25 {
                let rate = Double(max(0, segment.offset - request.from)) / request.elapsed
                let left = Double(min(request.end, end) - segment.offset)
                if left > rate * patience, end - middle > (slow?.given ?? 0) { slow = (index, middle, end - middle) }
            }
        }
        guard let chosen = clean ?? slow, let end = segments[chosen.index].end else { return nil }
        segments[chosen.index].end = chosen.cut
        segments.append(Segment(start: chosen.cut, end: end))
        return segments.count - 1
    }

    /// A complete file's plan with `ranges` to be fetched again (bytes that failed a checksum):
    /// the bytes between them stay written, each range becomes an empty segment. Ranges are
    /// clipped to the file and merged where they touch.
    package func refetching(_ ranges: [Range<Int64>]) -> SegmentPlan {
        guard let total = totalSize else { return self }
        var merged: [Range<Int64>] = []
        for range in ranges.map({ max(0, $0.lowerBound)..<min(total, $0.upperBound) }).filter({ !$0.isEmpty })
            .sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = merged.last, range.lowerBound <= last.upperBound {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        var segments: [Segment] = []
        var next: Int64 = 0
        for range in merged {
            if range.lowerBound > next {
                segments.append(Segment(start: next, end: range.lowerBound, written: range.lowerBound - next))
            }
            segments.append(Segment(start: range.lowerBound, end: range.upperBound))
            next = range.upperBound
        }
        if next < total { segments.append(Segment(start: next, end: total, written: total - next)) }
        return SegmentPlan(segments: segments.isEmpty ? [Segment(start: 0, end: 0)] : segments, totalSize: total)
    }

    /// Whether a remainder is large enough to split, now or once its
    /// connection shows itself slow: an idle connection waits while one is.
    package func hasSplittableRemainder(minSegmentSize: Int64) -> Bool {
        segments.contains { $0.isSplittable(minSegmentSize: minSegmentSize) }
    }

    /// How much one request of a segmented download asks for: at least
    /// `floor` (16 MiB), and more when the server is far, so the round trip
    /// between two requests of a connection costs at most about 2% of its
    /// time (50 round trips' worth of bytes at `rate`, bytes per second),
    /// never over `ceiling` (256 MiB).
    ///
    /// Bounded requests let an idle connection take work from a busy one
    /// without cutting a response short (see `splitLargestRemainder`); the
    /// window is also the most an idle connection cannot take from a steady
    /// one near the end. `roundTrip` is the shortest wait for a response head
    /// the connection has seen over at least two requests (nil before): one
    /// wait includes the connection's set-up, and on a busy machine a few
    /// include milliseconds of scheduling that a loopback server does not
    /// otherwise show.
    package static func requestWindow(rate: Double?, roundTrip: Double?,
                                     floor: Int64 = 16 << 20, ceiling: Int64 = 256 << 20) -> Int64 {
        guard let rate, let roundTrip, rate > 0, roundTrip > 0 else { return floor }
        let wanted = rate * roundTrip * 50
        guard wanted.isFinite, wanted < Double(ceiling) else { return ceiling }
        return max(floor, Int64(wanted))
    }
}
