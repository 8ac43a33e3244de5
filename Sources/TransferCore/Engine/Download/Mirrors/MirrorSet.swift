import Foundation

/// Several URLs for one file (a job's `mirrors`, a metalink's list): which of them are still
/// used, what version each is pinned to, how fast each has been, and which bytes each served.
///
/// A pure value, every decision of a mirrored download made here and tested without I/O;
/// `MirrorTransport` keeps it under a lock and makes the requests. The rules:
/// - Before any byte is used, every mirror is asked for its first byte (`settle`). The file's
///   size is the one the job gives, else the one most mirrors report (the first listed wins a
///   tie); a mirror with another size, one that does not serve ranges, or one that fails is
///   dropped with the reason. Each mirror's validators (ETag, Last-Modified) are pinned: its
///   later answers must name the same version, or it is dropped, its bytes unused.
/// - A connection asks the mirror with a free slot (`perMirror` each) that has been fastest
///   per connection; one not measured yet is tried first. Faster mirrors finish their requests
///   sooner and so serve more of the file: the spread follows the measured speed.
/// - A failed exchange rests its mirror (1, 2, 4 … 30 s); five failures in a row drop it.
package struct MirrorSet: Equatable, Sendable {
    package struct Mirror: Equatable, Sendable {
        package var url: URL
        package var inFlight = 0
        /// Bytes per second one connection got from it, smoothed over its exchanges (nil: not measured).
        package var rate: Double?
        /// Body bytes it delivered in this run.
        package var bytesServed: Int64 = 0
        /// Why it is no longer asked (nil: in use).
        package var dropped: String?
        /// Failed exchanges in a row.
        package var failures = 0
        /// It is not asked before this time (seconds, any monotonic clock) after a failure.
        package var restingUntil: Double = 0
        /// The version it served, pinned at its first answer.
        package var pin: ResponseValidators?
        /// Dropped after failures that may pass (it rested `maxFailures` times): the download
        /// may be tried again later.
        package var droppedAfterFailures = false

        package init(url: URL) { self.url = url }
    }

    /// Which bytes one mirror delivered.
    package struct Served: Equatable, Sendable {
        package var range: Range<Int64>
        package var mirror: Int
    }

    /// What a mirror's answer to its first byte said (`settle`).
    package enum Probe: Equatable, Sendable {
        case answered(size: Int64, validators: ResponseValidators)
        /// A failure that says nothing of its file: the mirror is dropped.
        case failed(reason: String)
        /// A failure that may pass (a refused connection, a timeout, 408, 429, 5xx): the mirror
        /// rests and is asked again later; it serves nothing before its first answer pins it.
        case unavailable(reason: String)
    }

    /// What a later answer of a mirror means (`judge`).
    package enum Judgement: Equatable, Sendable {
        /// Its bytes may be used.
        case accept
        /// Not this mirror's bytes: drop it and ask another.
        case drop(reason: String)
        /// An error status worth another try elsewhere (429, 5xx): rest it and ask another.
        case rest(reason: String)
    }

    package private(set) var mirrors: [Mirror]
    /// Connections one mirror may take at once (aria2's `--max-connection-per-server`).
    package let perMirror: Int
    /// The file's size, once settled.
    package private(set) var size: Int64?
    /// The validators every accepted answer is shown to the download with: the pins of the first
    /// mirror accepted when the download started. The download's checkpoint holds them, so a
    /// resume sees the same version whichever mirrors answer.
    package private(set) var canonical = ResponseValidators()
    /// Bumped when every mirror's file changed since the download started: the download then
    /// sees another version and starts over (`canonical` names the generation).
    package private(set) var generation = 0
    /// Which bytes each mirror delivered in this run, in order.
    package private(set) var served: [Served] = []
    /// Set after a checksum mismatch: only this mirror is asked from then on.
    package private(set) var only: Int?
    /// Whether the finished file is checked (a SHA-256 or piece hashes). Without, a resumed
    /// download takes no bytes from a mirror without a pin: nothing could tell whether its
    /// version is the partial file's.
    package var verified = false
    /// Whether pins were restored from a checkpoint (the partial file has bytes of their versions).
    package private(set) var resuming = false
    package static let unmatchable = "it served no bytes of the partial file, and without a checksum its version cannot be "
        + "matched with theirs (give --sha256, --checksums or a metalink with hashes to use it)"

    /// The least share of the fastest mirror's speed a mirror must have to be asked (1/8).
    package static let slowestShare = 8.0
    /// Failures in a row that drop a mirror.
    package static let maxFailures = 5

    package init(urls: [URL], perMirror: Int) {
        var seen = Set<String>()
        mirrors = urls.filter { seen.insert($0.absoluteString).inserted }.map(Mirror.init)
        self.perMirror = max(1, perMirror)
    }

    package var inUse: [Int] { mirrors.indices.filter { mirrors[$0].dropped == nil } }
    /// Connections all mirrors in use may take together.
    package var capacity: Int { (only != nil ? 1 : inUse.count) * perMirror }

    // MARK: Start

    /// What a checkpoint keeps: the size, the canonical validators, and each mirror's pin.
    package var pins: MirrorPins {
        var byURL: [String: ResponseValidators] = [:]
        for mirror in mirrors { if let pin = mirror.pin { byURL[mirror.url.absoluteString] = pin } }
        return MirrorPins(size: size, canonical: canonical, generation: generation, pins: byURL)
    }

    /// Takes the pins a checkpoint kept (a resumed download): each mirror must still serve the
    /// version it served then.
    package mutating func restore(_ saved: MirrorPins) {
        size = saved.size
        canonical = saved.canonical
        generation = saved.generation
        resuming = !saved.pins.isEmpty
        for index in mirrors.indices { mirrors[index].pin = saved.pins[mirrors[index].url.absoluteString] }
    }

    /// Forgets the pins (the partial file started over): the next `settle` starts afresh.
    package mutating func forgetPins() {
        resuming = false
        size = nil
        canonical = ResponseValidators()
        for index in mirrors.indices { mirrors[index].pin = nil }
    }

    /// Decides from every mirror's answer to its first byte which mirrors the download uses.
    /// - Parameter expectedSize: the size the job states (a metalink's), which outvotes the mirrors.
    /// - Returns: the mirrors dropped now, with the reasons.
    @discardableResult
    package mutating func settle(_ probes: [Int: Probe], expectedSize: Int64?, now: Double = 0) -> [(mirror: Int, reason: String)] {
        var drops: [(Int, String)] = []
        func drop(_ index: Int, _ reason: String) {
            guard mirrors[index].dropped == nil else { return }
            mirrors[index].dropped = reason
            drops.append((index, reason))
        }
        let answered = mirrors.indices.compactMap { index -> (Int, Int64, ResponseValidators)? in
            guard mirrors[index].dropped == nil else { return nil }
            switch probes[index] {
            case .answered(let size, let validators)?: return (index, size, validators)
            case .failed(let reason)?:
                drop(index, reason)
                return nil
            case .unavailable(let reason)?:
                rest(index, reason: reason, now: now)
                if let dropped = mirrors[index].dropped { drops.append((index, dropped)) }
                return nil
            case nil:
                drop(index, "it did not answer")
                return nil
            }
        }
        // A resumed download: every pinned mirror that still answers must serve what it served.
        let pinned = answered.filter { mirrors[$0.0].pin != nil }
        let unchanged = pinned.filter { mirrors[$0.0].pin!.matches($0.2) && $0.1 == size }
        if !pinned.isEmpty && unchanged.isEmpty {
            // Every mirror that served bytes of the partial file now serves another version:
            // the file changed. A new generation starts; the download sees it as a change.
            let next = generation + 1
            forgetPins()
            generation = next
        }

        let agreed: Int64
        if let expectedSize {
            agreed = expectedSize
        } else if let size {
            agreed = size
        } else {
            // The size most mirrors report; a tie goes to the one listed first.
            var votes: [Int64: Int] = [:]
            for (_, size, _) in answered { votes[size, default: 0] += 1 }
            guard let best = votes.values.max() else { return drops }
            agreed = answered.first { votes[$0.1] == best }!.1
        }
        size = agreed
        for (index, reported, validators) in answered where mirrors[index].dropped == nil {
            if reported != agreed {
                let others = expectedSize != nil ? "the size given is \(agreed)" : "the other mirrors say \(agreed)"
                drop(index, "it serves \(reported) bytes; \(others)")
            } else if let pin = mirrors[index].pin, !pin.matches(validators) {
                drop(index, "since the partial file was started, \(ResponseDecision.versionChange(pin, validators))")
            } else if mirrors[index].pin == nil && resuming && !verified {
                drop(index, Self.unmatchable)
            } else {
                mirrors[index].pin = validators
                if canonical.isEmpty && !validators.isEmpty {
                    canonical = validators
                    if generation > 0 {
                        // Another version than the partial file's, whatever the servers call it.
                        canonical.etag = "\"transferd-mirrors-\(generation)\""
                    }
                }
            }
        }
        if canonical.isEmpty, generation > 0 { canonical.etag = "\"transferd-mirrors-\(generation)\"" }
        // Resuming without a checksum: a mirror with no pin may serve another version of the
        // same size, which nothing would catch. It is left out (a checksum lets it take part).
        if resuming && !verified {
            for index in inUse where mirrors[index].pin == nil { drop(index, Self.unmatchable) }
        }
        return drops
    }

    // MARK: Running

    /// The mirror the next exchange asks, taking one of its slots; nil when none is free now.
    package mutating func choose(now: Double) -> Int? {
        // A mirror an eighth as fast as the best is not worth a connection: the bytes it holds
        // would be the last to arrive. It is asked again only when the faster ones are gone.
        let pool = only.map { [$0] } ?? inUse
        let best = pool.compactMap { mirrors[$0].rate }.max() ?? 0
        let candidates = pool.filter {
            mirrors[$0].dropped == nil && mirrors[$0].inFlight < perMirror && mirrors[$0].restingUntil <= now
                && (mirrors[$0].rate ?? .infinity) * Self.slowestShare >= best
        }
        // Not yet measured first (in the order listed), then the fastest per connection.
        let chosen = candidates.first { mirrors[$0].rate == nil }
            ?? candidates.max { (mirrors[$0].rate ?? 0) < (mirrors[$1].rate ?? 0) }
        if let chosen { mirrors[chosen].inFlight += 1 }
        return chosen
    }

    /// When a slot may free up or a resting mirror wake (seconds from `now`), or nil when no
    /// mirror is left to wait for.
    package func wait(now: Double) -> Double? {
        let usable = (only.map { [$0] } ?? inUse).filter { mirrors[$0].dropped == nil }
        guard !usable.isEmpty else { return nil }
        let resting = usable.map { mirrors[$0].restingUntil - now }.filter { $0 > 0 }
        return min(0.05, resting.min() ?? 0.05)
    }

    /// An exchange of `mirror` ended: `bytes` of body in `seconds` after its head, from `offset`
    /// (nil: not a ranged body of the file), and whether it failed.
    package mutating func finish(_ mirror: Int, bytes: Int64, seconds: Double, offset: Int64?, failure: String?, now: Double) {
        mirrors[mirror].inFlight = max(0, mirrors[mirror].inFlight - 1)
        if bytes > 0 {
            mirrors[mirror].bytesServed += bytes
            if let offset { noteServed(offset..<(offset + bytes), by: mirror) }
            // A short exchange says little about the mirror's speed.
            if seconds > 0.05 || bytes >= 256 << 10 {
                let measured = Double(bytes) / max(seconds, 0.001)
                mirrors[mirror].rate = mirrors[mirror].rate.map { 0.5 * $0 + 0.5 * measured } ?? measured
            }
        }
        if let failure {
            rest(mirror, reason: failure, now: now)
        } else {
            mirrors[mirror].failures = 0
        }
    }

    /// The most a request to `mirror` asks for from it, when less than the download asked: about a
    /// second of what it has shown, at least 256 KiB, and 1 MiB before it is measured, for a mirror
    /// under half the fastest's speed or not measured yet. A slow mirror then holds little of the
    /// file at a time, and its last bytes are never the download's last. Nil: as the download asked.
    package func requestCap(_ mirror: Int) -> Int64? {
        let best = inUse.compactMap { mirrors[$0].rate }.max() ?? 0
        guard let rate = mirrors[mirror].rate else { return 1 << 20 }
        guard rate * 2 < best else { return nil }
        return max(256 << 10, Int64(rate))
    }

    /// Gives a slot back without an exchange (the answer was refused before its body).
    package mutating func release(_ mirror: Int) {
        mirrors[mirror].inFlight = max(0, mirrors[mirror].inFlight - 1)
    }

    /// A failure of `mirror`: it rests, longer each time, and is dropped after `maxFailures` in a row.
    package mutating func rest(_ mirror: Int, reason: String, now: Double) {
        mirrors[mirror].failures += 1
        let failures = mirrors[mirror].failures
        if failures >= Self.maxFailures {
            drop(mirror, reason: "it failed \(failures) times in a row (last: \(reason))")
            mirrors[mirror].droppedAfterFailures = true
        } else {
            mirrors[mirror].restingUntil = now + min(30, Double(1 << (failures - 1)))
        }
    }

    /// Stops asking `mirror`. Returns false when it was dropped already.
    @discardableResult
    package mutating func drop(_ mirror: Int, reason: String) -> Bool {
        guard mirrors[mirror].dropped == nil else { return false }
        mirrors[mirror].dropped = reason
        return true
    }

    /// Judges a later answer of `mirror` to a request for bytes from `offset`, before any of its
    /// body is used: a range of the settled size and of the pinned version, or an error status.
    /// `ranged` is false for a request without a range (a HEAD, or a whole file from one stream).
    package func judge(_ mirror: Int, status: Int, contentRange: ContentRange?, validators: ResponseValidators,
                       offset: Int64, ranged: Bool = true) -> Judgement {
        switch status {
        case 304 where !ranged:
            // A conditional HEAD's "not modified": of the mirror's own file, pinned below.
            return .accept
        case 200 where !ranged:
            if let pin = mirrors[mirror].pin, !pin.matches(validators) {
                return .drop(reason: ResponseDecision.versionChange(pin, validators))
            }
            return .accept
        case 206:
            guard let range = contentRange, range.first == offset else {
                return .drop(reason: "it answered a request for bytes from \(offset) with another range")
            }
            if let total = range.completeLength, let size, total != size {
                return .drop(reason: "it now serves \(total) bytes, not \(size)")
            }
            if let pin = mirrors[mirror].pin, !pin.matches(validators) {
                return .drop(reason: ResponseDecision.versionChange(pin, validators))
            }
            return .accept
        case 200:
            // Asked with If-Range, a whole file is another version's: say which.
            if let pin = mirrors[mirror].pin, !pin.matches(validators) {
                return .drop(reason: ResponseDecision.versionChange(pin, validators))
            }
            return .drop(reason: "it answered a range with the whole file (200)")
        case 416:
            // Asked past the end: only a mirror whose file is shorter says so.
            return .drop(reason: "it has no bytes from \(offset) (416)")
        case 408, 429, 500...599:
            return .rest(reason: "HTTP \(status)")
        default:
            return .drop(reason: "HTTP \(status)")
        }
    }

    // MARK: Checking

    /// Records that `mirror`'s bytes were written at `range` of the file (`noteServed`).
    package mutating func wrote(_ range: Range<Int64>, by mirror: Int) {
        guard mirrors.indices.contains(mirror), !range.isEmpty else { return }
        noteServed(range, by: mirror)
    }

    /// Pins a mirror that had no pin yet at the version of its first accepted answer.
    package mutating func pinIfNeeded(_ mirror: Int, _ validators: ResponseValidators) {
        if mirrors[mirror].pin == nil { mirrors[mirror].pin = validators }
    }

    /// Whether every mirror gone was dropped after failures that may pass (none refused its file).
    package var onlyFailuresLeft: Bool {
        mirrors.allSatisfy { $0.dropped == nil || $0.droppedAfterFailures }
    }

    /// Records that `mirror` delivered `range`, replacing whatever another delivered there
    /// before (a range fetched again): `served` says where the file's bytes came from now.
    private mutating func noteServed(_ range: Range<Int64>, by mirror: Int) {
        if served.contains(where: { $0.range.overlaps(range) }) {
            served = served.flatMap { part -> [Served] in
                guard part.range.overlaps(range) else { return [part] }
                var kept: [Served] = []
                if part.range.lowerBound < range.lowerBound {
                    kept.append(Served(range: part.range.lowerBound..<range.lowerBound, mirror: part.mirror))
                }
                if part.range.upperBound > range.upperBound {
                    kept.append(Served(range: range.upperBound..<part.range.upperBound, mirror: part.mirror))
                }
                return kept
            }
        }
        if let last = served.last, last.mirror == mirror, last.range.upperBound == range.lowerBound {
            served[served.count - 1].range = last.range.lowerBound..<range.upperBound
        } else {
            served.append(Served(range: range, mirror: mirror))
        }
    }

    /// Bytes of the file as it is now that came from `mirror` in this run.
    package func holds(_ mirror: Int) -> Int64 {
        served.filter { $0.mirror == mirror }.reduce(0) { $0 + Int64($1.range.count) }
    }

    /// The mirrors that delivered any of `bytes` in this run, in list order.
    package func suspects(in bytes: Range<Int64>) -> [Int] {
        Set(served.filter { $0.range.overlaps(bytes) }.map(\.mirror)).sorted()
    }

    /// Whether every byte of `bytes` came from `mirror` in this run.
    package func servedEntirely(_ bytes: Range<Int64>, by mirror: Int) -> Bool {
        var covered = bytes.lowerBound
        for part in served.filter({ $0.mirror == mirror && $0.range.overlaps(bytes) }).sorted(by: { $0.range.lowerBound < $1.range.lowerBound }) {
            guard part.range.lowerBound <= covered else { return false }
            covered = max(covered, part.range.upperBound)
        }
        return covered >= bytes.upperBound
    }

    /// After the whole file failed its checksum: the one mirror asked from now on and the bytes
    /// it did not serve, to fetch again from it. The first time, the mirror that served the most
    /// of the file; after that, the file was all the chosen mirror's and still failed, so that
    /// mirror is dropped (`proven`) and the next one in use is chosen. Nil when none is left.
    package mutating func narrowToOne() -> (mirror: Int, refetch: [Range<Int64>], proven: (mirror: Int, reason: String)?)? {
        guard let size else { return nil }
        var proven: (Int, String)?
        if let current = only, servedEntirely(0..<size, by: current) {
            let reason = "the whole file from it fails the checksum"
            if drop(current, reason: reason) { proven = (current, reason) }
        }
        guard let chosen = inUse.max(by: { holds($0) < holds($1) || (holds($0) == holds($1) && $0 > $1) }) else { return nil }
        var gaps: [Range<Int64>] = []
        var next: Int64 = 0
        for part in served.filter({ $0.mirror == chosen }).sorted(by: { $0.range.lowerBound < $1.range.lowerBound }) {
            if part.range.lowerBound > next { gaps.append(next..<part.range.lowerBound) }
            next = max(next, part.range.upperBound)
        }
        if next < size { gaps.append(next..<size) }
        guard !gaps.isEmpty else {
            // The file is all this mirror's and failed: it is wrong, and so is every choice left.
            drop(chosen, reason: "the whole file from it fails the checksum")
            return nil
        }
        only = chosen
        return (chosen, gaps, proven)
    }
}

/// What a download's checkpoint keeps of its mirrors (`MirrorSet.pins`).
package struct MirrorPins: Codable, Equatable, Sendable {
    package var size: Int64?
    package var canonical: ResponseValidators
    package var generation: Int
    /// Each mirror's version, by its URL.
    package var pins: [String: ResponseValidators]
}
