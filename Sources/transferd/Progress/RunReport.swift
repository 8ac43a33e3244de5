import Foundation
import TransferCore

/// The end of a run in words: what was done, how fast, and for each failure
/// what failed, why, and the command that tries it again.
struct RunReport {
    var progress: RunProgress
    var summary: RunSummary
    var now: Date
    var style: TerminalStyle
    var failedFolder: String
    /// Failures listed one by one before "+N more".
    var maxFailuresListed = 20

    func lines() -> [String] {
        var lines: [String] = []
        if summary.interrupted {
            lines.append(style.yellow("Interrupted:") + " running jobs are paused with their progress saved;"
                         + " run the same command to resume.")
        }
        lines.append(headline())
        lines += heldLines()
        if summary.rejectedFiles > 0 {
            let rejected = PathText.parent(failedFolder) + "/rejected"
            lines.append("Rejected job files are in \(rejected)/ with NAME.error beside each;"
                         + " fix one and drop it into the queue again")
        }
        lines += failureLines(failuresOnly: false)
        return lines
    }

    /// Only what `--quiet` shows: the failures and what to do about them.
    func quietLines() -> [String] {
        failureLines(failuresOnly: true)
    }

    func headline() -> String {
        let elapsed = max(0, progress.elapsed(at: now))
        var counts = ["\(summary.done) done"]
        if progress.skipped > 0 { counts[0] += " (\(progress.skipped) already present)" }
        counts.append(summary.failed > 0 ? style.red("\(summary.failed) failed") : "0 failed")
        if summary.cancelled > 0 { counts.append("\(summary.cancelled) cancelled") }
        if progress.paused > 0 { counts.append("\(progress.paused) paused") }
        if progress.held > 0 { counts.append("\(progress.held) held") }
        if summary.rejectedFiles > 0 { counts.append("\(summary.rejectedFiles) job file\(summary.rejectedFiles == 1 ? "" : "s") rejected") }
        let bytes = progress.bytesTransferred
        let rate = elapsed > 0 ? " (\(Format.rate(Double(bytes) / elapsed)))" : ""
        return style.bold("Summary:") + " " + counts.joined(separator: ", ")
            + "; \(Format.bytes(bytes)) transferred in \(Format.seconds(elapsed))\(rate)"
    }

    /// What a person's pause left for later: the run ended with jobs it may not start.
    func heldLines() -> [String] {
        var lines: [String] = []
        if summary.queuePaused {
            let waiting = summary.runnableLeft
            lines.append(style.yellow("The queue is paused") + " (transferd pause --all): \(waiting) job\(waiting == 1 ? "" : "s") "
                         + "wait\(waiting == 1 ? "s" : ""); `transferd resume --all` runs them")
        }
        if summary.heldInStore > 0 {
            let held = summary.heldInStore
            lines.append("\(held) job\(held == 1 ? " is" : "s are") held (paused by transferd pause); "
                         + "`transferd resume ID` or `transferd resume --all` takes \(held == 1 ? "it" : "them") up again")
        }
        return lines
    }

    private func failureLines(failuresOnly: Bool) -> [String] {
        var lines: [String] = []
        let failures = progress.failures
        if !failures.isEmpty {
            lines.append(style.red("Failed") + " (\(failures.count)):")
            for failure in failures.prefix(maxFailuresListed) {
                lines.append("  \(failure.id)  \(Text.sanitized(failure.url))")
                lines.append("    \(Text.sanitized(failure.error ?? "unknown error"))")
                lines.append("    fix the cause, then: transferd retry \(failure.id)")
            }
            if failures.count > maxFailuresListed {
                lines.append("  +\(failures.count - maxFailuresListed) more, listed in \(failedFolder)/")
            }
        }
        let earlier = summary.failedInStore - summary.failed
        if earlier > 0 {
            lines.append("\(earlier) job\(earlier == 1 ? "" : "s") failed in earlier runs (see \(failedFolder)/;"
                         + " `transferd retry --failed` queues every failed job again)")
        } else if !failures.isEmpty && failures.count > 1 {
            lines.append("`transferd retry --failed` queues every failed job again")
        }
        return lines
    }
}
