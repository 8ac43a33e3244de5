/// Text from outside (a server's message, a header, an object key, a file name)
/// made safe to print: every character that a terminal would take as a command
/// or that reorders what it shows is written out as `\u{XX}` instead, so the
/// reader sees that it was there and nothing acts on it.
package enum TerminalText {
    /// C0 controls (tab and line ends too), DEL, C1 controls, and the bidirectional
    /// marks, embeddings, overrides and isolates: U+061C, U+200E, U+200F,
    /// U+202A–U+202E, U+2066–U+2069.
    package static func mustEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0..<0x20, 0x7F...0x9F, 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }

    /// `text` with each character of `mustEscape` written as `\u{HEX}` (upper-case hex);
    /// text without one is returned as it is.
    package static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: mustEscape) else { return text }
        var shown = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if mustEscape(scalar) {
                shown.append(contentsOf: "\\u{\(String(scalar.value, radix: 16, uppercase: true))}".unicodeScalars)
            } else {
                shown.append(scalar)
            }
        }
        return String(shown)
    }
}
