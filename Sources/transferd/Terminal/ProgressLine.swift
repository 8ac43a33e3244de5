import Foundation
import TransferCore

/// The one-line progress display of `transferd get` on stderr.
///
/// On a terminal it redraws one line at most four times a second; otherwise
/// it prints only start, retry and finish lines (no escape codes in logs).
final class ProgressLine: Sendable {
    private let name: String
    private let quiet: Bool
    /// The line is drawn while it is held, so two threads' lines never interleave.
    private let state = Locked(State())

    private struct State {
        var started = Date()
        var lastSample: (time: Date, written: Int64)?
        var speed: Double = 0
        var live = LiveLine()
        var announced = false

        mutating func updateSpeed(_ written: Int64) {
            let now = Date()
            if let sample = lastSample {
                speed = RunProgress.smooth(speed, delta: max(0, written - sample.written),
                                           interval: now.timeIntervalSince(sample.time))
            }
            lastSample = (now, written)
        }
    }

    init(name: String, quiet: Bool) {
        self.name = name
        self.quiet = quiet
    }

    func handle(_ event: DownloadEvent) {
        guard !quiet else { return }
        state.withLock { state in
            switch event {
            case .started(let total, let resumedFrom, let segments):
                state.started = Date()
                state.lastSample = (Date(), resumedFrom)
                guard let total else {
                    // A fresh single stream learns its size from the first response: announce it then.
                    if resumedFrom == 0 {
                        state.announced = false
                    } else {
                        state.live.show("\(name): resuming at \(Format.bytes(resumedFrom))", permanent: true)
                        state.announced = true
                    }
                    return
                }
                state.announced = true
                let resume = resumedFrom > 0 ? ", resuming at \(Format.bytes(resumedFrom))" : ""
                let connections = segments > 1 ? ", \(segments) connections" : ""
                state.live.show("\(name): \(Format.bytes(total))\(resume)\(connections)", permanent: true)
            case .progress(let written, let total, _):
                state.updateSpeed(written)
                if !state.announced, written > 0 {
                    state.announced = true
                    state.live.show("\(name): \(total.map(Format.bytes) ?? "size unknown")", permanent: true)
                }
                guard state.live.interactive else { return }
                state.live.show(progressText(written: written, total: total, speed: state.speed), permanent: false)
            case .retrying(let attempt, let delay, let reason, let resumeAt):
                if let resumeAt, delay == 0 {
                    state.live.show("\(name): \(reason); resuming at \(Format.bytes(resumeAt))", permanent: true)
                } else {
                    state.live.show("\(name): \(reason); retry \(attempt) in \(String(format: "%.1f", delay)) s", permanent: true)
                }
            case .restarted(let reason):
                state.live.show("\(name): starting over: \(reason)", permanent: true)
            case .verifying:
                if state.live.interactive { state.live.show("\(name): verifying SHA-256", permanent: false) }
            case .refetching(let bytes, let reason):
                state.live.show("\(name): fetching \(Format.bytes(bytes)) again: \(reason)", permanent: true)
            case .mirrorDropped(let url, let reason):
                state.live.show("\(name): mirror \(url) dropped: \(reason)", permanent: true)
            }
        }
    }

    private func progressText(written: Int64, total: Int64?, speed: Double) -> String {
        let rate = Format.rate(speed)
        guard let total, total > 0 else { return "\(name)  \(Format.bytes(written))  \(rate)" }
        let fraction = min(1, Double(written) / Double(total))
        let eta = speed > 0 ? Format.duration(Double(total - written) / speed) : "--:--"
        let barWidth = 20
        let filled = Int(fraction * Double(barWidth))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: barWidth - filled)
        let text = String(format: "%@ [%@] %3d%%  %@ / %@  %@  ETA %@", name, bar, Int(fraction * 100),
                          Format.bytes(written), Format.bytes(total), rate, eta)
        return String(text.prefix(max(20, Output.terminalSize(fd: 2).columns - 1)))
    }

    /// Removes the live line before an error message.
    func clear() {
        state.withLock { $0.live.erase() }
    }

    func finish(_ result: DownloadResult) {
        clear()
        guard !quiet else { return }
        if result.skipped {
            Output.err("\(result.path): already present and identical, skipped\n")
            return
        }
        let elapsed = max(result.elapsed, 0.001)
        let fetched = Double(result.bytesFetched)
        var text = "\(result.path): saved \(Format.bytes(result.size)) in \(String(format: "%.2f", elapsed)) s"
            + " (\(Format.rate(fetched / elapsed)))"
        if result.resumedFrom > 0 { text += ", resumed from \(Format.bytes(result.resumedFrom))" }
        if result.restarts > 0 { text += ", restarted \(result.restarts)×" }
        if result.sha256 != nil { text += ", sha256 ok" }
        Output.err(text + "\n")
        // Where the bytes came from: each mirror's share, and the ones dropped.
        if result.mirrors.count > 1 {
            let total = max(1, result.mirrors.reduce(0) { $0 + $1.kept })
            for mirror in result.mirrors {
                let share = String(format: "%.0f%%", Double(mirror.kept) * 100 / Double(total))
                let discarded = mirror.bytes > mirror.kept ? ", \(Format.bytes(mirror.bytes - mirror.kept)) more fetched and not kept" : ""
                let state = mirror.dropped.map { ", dropped: \($0)" } ?? ""
                Output.err("  \(mirror.url): \(Format.bytes(mirror.kept)) of the file (\(share))\(discarded)\(state)\n")
            }
        }
    }
}
