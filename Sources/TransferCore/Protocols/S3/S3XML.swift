import CSystem
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// One element of an S3 answer, read with a real XML parser (FoundationXML's
/// `XMLParser`, libxml2 underneath): character and entity references
/// (`&#34;` as Go servers write it), CDATA, namespaces and prefixes,
/// attributes and white space are handled by the parser, not by string
/// scanning. Names are local names (`s3:ETag` is `ETag`); text is the
/// element's own character data.
struct S3XMLElement: Equatable {
    var name: String
    var text: String = ""
    var children: [S3XMLElement] = []

    /// The first child named `name`.
    func child(_ name: String) -> S3XMLElement? { children.first { $0.name == name } }

    /// Every child named `name`, in order.
    func children(_ name: String) -> [S3XMLElement] { children.filter { $0.name == name } }

    /// The text of the first child named `name`, without surrounding white space.
    func value(_ name: String) -> String? { child(name).map { Self.trimmed($0.text) } }

    /// Without XML's white space (space, tab, CR, LF) at either end.
    static func trimmed(_ text: String) -> String { ByteTrim.string(text) }

    /// Parses a document; nil when it is not well-formed XML. External entities
    /// are never loaded and libxml2's limits on entity expansion apply.
    static func parse(_ text: String) -> S3XMLElement? {
        parse(Data(text.utf8))
    }

    static func parse(_ data: Data) -> S3XMLElement? {
        // Some servers (moto) put a line break before the XML declaration, which
        // libxml2 refuses: leading white space is not part of the document.
        var start = data.firstIndex { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) } ?? data.endIndex
        // No processing instruction reaches XMLParser: FoundationXML's handler
        // reads a PI's data with strlen, and libxml2 hands it NULL for a PI
        // without data (`<?x?>`), which crashes the process (found by fuzzing).
        // S3 answers hold none; the XML declaration is cut off here first.
        let body = data[start...]
        if body.starts(with: Array("<?xml".utf8)), body.count > 5,
           [0x20, 0x09, 0x0A, 0x0D].contains(body[body.startIndex + 5]) {
            guard let end = Self.find(Array("?>".utf8), in: body) else { return nil }
            start = end + 2
        }
        if Self.find(Array("<?".utf8), in: data[start...]) != nil { return nil }
        // Nor a document type: its entities could rebuild a processing instruction
        // after the check above, and S3 answers declare none.
        if Self.find(Array("<!DOCTYPE".utf8), in: data[start...]) != nil || Self.find(Array("<!ENTITY".utf8), in: data[start...]) != nil {
            return nil
        }
        let parser = XMLParser(data: data[start...])
        parser.shouldProcessNamespaces = true
        parser.shouldReportNamespacePrefixes = false
        parser.shouldResolveExternalEntities = false
        let builder = Builder()
        parser.delegate = builder
        guard parser.parse(), builder.failed == false else { return nil }
        return builder.root
    }

    /// The index where `needle` first starts in `haystack`.
    /// (memmem over the bytes: a listing of 1,000 keys is some 300 KB, searched four times.)
    static func find(_ needle: [UInt8], in haystack: Data.SubSequence) -> Data.Index? {
        guard !needle.isEmpty, needle.count <= haystack.count else { return nil }
        return haystack.withUnsafeBytes { bytes -> Data.Index? in
            needle.withUnsafeBytes { pattern -> Data.Index? in
                guard let base = bytes.baseAddress,
                      let found = memmem(base, bytes.count, pattern.baseAddress, pattern.count) else { return nil }
                return haystack.startIndex + (UnsafeRawPointer(found) - base)
            }
        }
    }

    /// Collects the tree from the parser's events (one document, on the calling thread).
    private final class Builder: NSObject, XMLParserDelegate {
        var stack: [S3XMLElement] = []
        var root: S3XMLElement?
        var failed = false

        func parser(_ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
                    qualifiedName: String?, attributes: [String: String] = [:]) {
            stack.append(S3XMLElement(name: elementName))
        }

        func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
            guard let done = stack.popLast() else { failed = true; return }
            if stack.isEmpty { root = done } else { stack[stack.count - 1].children.append(done) }
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            guard !stack.isEmpty else { return }
            stack[stack.count - 1].text += string
        }

        func parser(_ parser: XMLParser, foundCDATA CDATABlock: Data) {
            guard !stack.isEmpty else { return }
            stack[stack.count - 1].text += String(decoding: CDATABlock, as: UTF8.self)
        }

        func parser(_ parser: XMLParser, parseErrorOccurred parseError: Error) { failed = true }
    }
}

/// What S3 error documents say: `<Error><Code>…</Code><Message>…</Message></Error>`.
struct S3ErrorDocument: Equatable {
    var code: String
    var message: String

    /// The error in `body`, when it is an S3 error document.
    init?(_ body: String) {
        guard let root = S3XMLElement.parse(body), root.name == "Error", let code = root.value("Code") else { return nil }
        self.code = code
        message = root.value("Message") ?? ""
    }
}

/// Text for an XML request body.
enum XMLText {
    /// By Unicode scalar, not by Character: `<` followed by a combining mark
    /// is one Character, which a Character-wise replace would leave unescaped
    /// (found by fuzzing).
    static func escape(_ text: String) -> String {
        var escaped = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": escaped.append(contentsOf: "&amp;".unicodeScalars)
            case "<": escaped.append(contentsOf: "&lt;".unicodeScalars)
            case ">": escaped.append(contentsOf: "&gt;".unicodeScalars)
            case "\"": escaped.append(contentsOf: "&quot;".unicodeScalars)
            default: escaped.append(scalar)
            }
        }
        return String(escaped)
    }
}
