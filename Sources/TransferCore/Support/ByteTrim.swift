/// Cutting bytes off both ends of text, by UTF-8 byte rather than by Character
/// (cheaper than Foundation's character sets and than walking Characters):
/// header lines, XML values and quoted ETags all go through here.
enum ByteTrim {
    /// Space, tab, CR and LF: white space to HTTP header lines and to XML alike.
    static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A }

    /// `bytes` without the bytes `drop` accepts at either end, decoded as UTF-8.
    static func string<Bytes: BidirectionalCollection>(_ bytes: Bytes, dropping drop: (UInt8) -> Bool = isSpace) -> String
    where Bytes.Element == UInt8 {
        guard let kept = kept(bytes, dropping: drop) else { return "" }
        return String(decoding: bytes[kept], as: UTF8.self)
    }

    /// `text` without the bytes `drop` accepts at either end; `text` itself when there are none.
    static func string(_ text: String, dropping drop: (UInt8) -> Bool = isSpace) -> String {
        let bytes = text.utf8
        guard let kept = kept(bytes, dropping: drop) else { return "" }
        if kept.lowerBound == bytes.startIndex && bytes.index(after: kept.upperBound) == bytes.endIndex { return text }
        return String(decoding: bytes[kept], as: UTF8.self)
    }

    /// The indices from the first byte to keep to the last; nil when every byte is dropped.
    private static func kept<Bytes: BidirectionalCollection>(_ bytes: Bytes, dropping drop: (UInt8) -> Bool)
        -> ClosedRange<Bytes.Index>? where Bytes.Element == UInt8 {
        guard let first = bytes.firstIndex(where: { !drop($0) }), let last = bytes.lastIndex(where: { !drop($0) }) else {
            return nil
        }
        return first...last
    }
}
