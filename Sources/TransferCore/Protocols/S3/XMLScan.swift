/// Just enough XML reading for S3's small, flat answers (UploadId, ETag,
/// Part lists, Error Code/Message): the text of elements by name.
enum XMLScan {
    /// The text of the first `<name>…</name>`, entities decoded.
    static func value(of name: String, in xml: String) -> String? {
        values(of: name, in: xml).first
    }

    /// The text of every `<name>…</name>`, in order.
    static func values(of name: String, in xml: String) -> [String] {
        var results: [String] = []
        var rest = xml[...]
        let open = "<\(name)>", close = "</\(name)>"
        while let start = rest.range(of: open), let end = rest.range(of: close, range: start.upperBound..<rest.endIndex) {
            results.append(decode(String(rest[start.upperBound..<end.lowerBound])))
            rest = rest[end.upperBound...]
        }
        return results
    }

    static func decode(_ text: String) -> String {
        text.replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&apos;", with: "'")
            .replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
            .replacingOccurrences(of: "&amp;", with: "&")
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
