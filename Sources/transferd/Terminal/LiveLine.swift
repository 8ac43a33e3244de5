import Foundation

/// The one live line a command keeps on stderr. On a terminal it is redrawn
/// in place and a permanent line is printed over it (the live line comes back
/// with the next update); elsewhere only permanent lines are printed, without
/// escape codes. Its owner serialises the calls.
struct LiveLine {
    let interactive = Output.stderrIsTerminal
    private var drawn = false

    mutating func show(_ text: String, permanent: Bool) {
        if interactive {
            Output.err("\r\u{1B}[2K" + text + (permanent ? "\n" : ""))
            drawn = !permanent
        } else if permanent {
            Output.err(text + "\n")
        }
    }

    /// Removes the live line (before an error message or a summary).
    mutating func erase() {
        if interactive && drawn { Output.err("\r\u{1B}[2K") }
        drawn = false
    }
}
