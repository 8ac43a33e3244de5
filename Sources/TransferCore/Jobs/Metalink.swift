import CSystem
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// One file a metalink describes: where it may be fetched, its size and its hashes.
package struct MetalinkFile: Equatable, Sendable {
    /// The file's name as the metalink gives it: a relative path, checked (not empty, not absolute, no `..` or `.`
    /// component, no empty component, no NUL or control characters, no backslash, at most 1024 bytes).
    package var name: String
    package var size: Int64?
    /// The whole file's SHA-256, lowercase hex (from <hash type="sha-256">), if given.
    package var sha256: String?
    /// Piece hashes, if given (sha-256 preferred over sha-1 when both are present).
    package var pieces: PieceHashes?
    /// The http(s) URLs, best first: Metalink 4 `priority` ascending (absent = lowest priority, i.e. after those
    /// with one), Metalink 3 `preference` descending; document order among equals. Other schemes (ftp, magnet,
    /// torrent metaurl) are skipped, not errors. Duplicates removed.
    package var urls: [URL]

    package init(name: String, size: Int64? = nil, sha256: String? = nil, pieces: PieceHashes? = nil, urls: [URL]) {
        self.name = name
        self.size = size
        self.sha256 = sha256
        self.pieces = pieces
        self.urls = urls
    }
}

package struct PieceHashes: Equatable, Sendable {
    package enum Algorithm: String, Sendable {
        case sha1 = "sha-1", sha256 = "sha-256"

        /// Bytes in one digest.
        package var digestLength: Int {
            switch self {
            case .sha1: 20
            case .sha256: 32
            }
        }
    }

    package var algorithm: Algorithm
    /// Bytes per piece (the last piece may be shorter).
    package var length: Int64
    /// One digest per piece, in order (20 bytes for sha-1, 32 for sha-256).
    package var hashes: [[UInt8]]

    package init(algorithm: Algorithm, length: Int64, hashes: [[UInt8]]) {
        self.algorithm = algorithm
        self.length = length
        self.hashes = hashes
    }

    /// One line of text for a job's store: `ALGORITHM:LENGTH:HEX…`, the digests one after another.
    package var encoded: String {
        "\(algorithm.rawValue):\(length):" + hashes.map { $0.map { String(format: "%02x", $0) }.joined() }.joined()
    }

    /// Reads `encoded`; nil for text it does not describe.
    package init?(encoded: String) {
        let parts = encoded.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, let algorithm = Algorithm(rawValue: String(parts[0])),
              !parts[1].isEmpty, parts[1].allSatisfy({ ("0"..."9").contains($0) }), let length = Int64(parts[1]), length > 0
        else { return nil }
        let hex = Array(parts[2].utf8)
        let width = algorithm.digestLength * 2
        guard hex.count % width == 0 else { return nil }
        func nibble(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            default: nil
            }
        }
        var hashes: [[UInt8]] = []
        hashes.reserveCapacity(hex.count / width)
        var index = 0
        while index < hex.count {
            var digest: [UInt8] = []
            for offset in stride(from: index, to: index + width, by: 2) {
                guard let high = nibble(hex[offset]), let low = nibble(hex[offset + 1]) else { return nil }
                digest.append(high << 4 | low)
            }
            hashes.append(digest)
            index += width
        }
        self.init(algorithm: algorithm, length: length, hashes: hashes)
    }

    /// The byte range of piece `index` in a file of `size` bytes: `length` bytes from `index * length`, the last
    /// one cut at `size`. A piece wholly past the end is the empty range at `size`; sums saturate, never trap.
    package func range(of index: Int, size: Int64) -> Range<Int64> {
        let size = max(size, 0)
        let (product, overflow) = Int64(max(index, 0)).multipliedReportingOverflow(by: max(length, 1))
        let lower = overflow ? size : min(product, size)
        let (end, endOverflow) = lower.addingReportingOverflow(max(length, 1))
        return lower..<(endOverflow ? size : min(end, size))
    }

    /// The pieces that overlap `bytes` (among those listed): empty for an empty range or one past the last piece.
    package func pieces(overlapping bytes: Range<Int64>) -> Range<Int> {
        let length = max(self.length, 1)
        let count = Int64(hashes.count)
        let first = min(max(bytes.lowerBound, 0) / length, count)
        guard bytes.upperBound > bytes.lowerBound, bytes.upperBound > 0 else { return Int(first)..<Int(first) }
        let upper = bytes.upperBound
        let last = min(upper / length + (upper % length == 0 ? 0 : 1), count)
        return Int(first)..<Int(max(first, last))
    }
}

/// A Metalink document (RFC 5854's Metalink 4, or Metalink 3.0's `.metalink`) read into the files it describes.
///
/// Outside input, read whole with FoundationXML's `XMLParser` (libxml2): bounded (`maxSize`), UTF-8 only, with
/// no document type, entity declaration or processing instruction (refused before the parser sees the bytes,
/// and external entities are never loaded). Only what a download uses is kept: names, sizes, SHA-256s, piece
/// hashes and http(s) URLs; unknown elements, and elements of other namespaces, are ignored. Fuzzed (`metalink`).
package enum Metalink {
    /// The largest document read (8 MiB); bigger is refused.
    package static let maxSize = 8 << 20

    /// The most bytes a file's name may have.
    static let maxNameBytes = 1024
    /// The longest piece read (1 GiB).
    static let maxPieceLength: Int64 = 1 << 30
    /// The most piece hashes one file may list.
    static let maxPieces = 1_000_000

    static let namespace4 = "urn:ietf:params:xml:ns:metalink"
    static let namespace3 = "http://www.metalinker.org/"

    /// Parses a metalink document. `origin` names it in errors (a path or URL, already redacted by the caller).
    /// Throws JobFileError (file: origin, line/column where XMLParser reports them, a message and a fix).
    package static func parse(_ data: Data, origin: String) throws -> [MetalinkFile] {
        let root = try Document.read(data, origin: origin)
        return try Reader(origin: origin, root: root).files()
    }

    /// Algorithm names as either version spells them (`sha-256`, `sha256`, any case), in RFC 5854's spelling.
    static func canonicalAlgorithm(_ type: String) -> String {
        let lower = ByteTrim.string(type).lowercased()
        switch lower {
        case "sha1": return "sha-1"
        case "sha224": return "sha-224"
        case "sha256": return "sha-256"
        case "sha384": return "sha-384"
        case "sha512": return "sha-512"
        default: return lower
        }
    }

    /// Hex digits in a digest of each algorithm whose hashes are checked (others are ignored).
    static let hexLength: [String: Int] = ["md5": 32, "sha-1": 40, "sha-224": 56, "sha-256": 64, "sha-384": 96, "sha-512": 128]

    /// Why `name` is not a safe relative path to save a file under; nil when it is.
    static func unsafeName(_ name: String) -> String? {
        if name.isEmpty { return "it is empty" }
        if name.utf8.count > maxNameBytes { return "it is longer than \(maxNameBytes) bytes" }
        if name.hasPrefix("/") { return "it is an absolute path" }
        if name.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) {
            return "it holds a NUL or control character"
        }
        if name.contains("\\") { return "it holds a backslash" }
        for component in name.split(separator: "/", omittingEmptySubsequences: false) {
            switch component {
            case "..": return "it has a \"..\" component"
            case ".": return "it has a \".\" component"
            case "": return "it has an empty component (\"//\" or a trailing \"/\")"
            default: continue
            }
        }
        return nil
    }

    /// A value as a message shows it: quoted, control characters escaped, cut after 100 characters.
    static func shown(_ text: String) -> String {
        let cut = text.count > 100 ? String(text.prefix(100)) + "…" : text
        return "\"" + TerminalText.escaped(cut) + "\""
    }

    /// The digest in `hex` when it is `count` hex digits (either case); nil otherwise.
    static func digest(_ hex: String, hexDigits count: Int) -> [UInt8]? {
        let bytes = Array(hex.utf8)
        guard bytes.count == count, count % 2 == 0 else { return nil }
        func value(_ byte: UInt8) -> UInt8? {
            switch byte {
            case 0x30...0x39: byte - 0x30
            case 0x61...0x66: byte - 0x61 + 10
            case 0x41...0x46: byte - 0x41 + 10
            default: nil
            }
        }
        var digest: [UInt8] = []
        digest.reserveCapacity(count / 2)
        var index = 0
        while index < count {
            guard let high = value(bytes[index]), let low = value(bytes[index + 1]) else { return nil }
            digest.append(high << 4 | low)
            index += 2
        }
        return digest
    }

    /// A whole number of digits only (no sign, no spaces), as Int64; nil otherwise or when it overflows.
    static func wholeNumber(_ text: String) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int64(text)
    }
}

// MARK: The document

extension Metalink {
    /// One element the reader may use (see `Document.kept`), with what it needs of it.
    struct Element {
        var name: String
        var attributes: [String: String]
        var text = ""
        var children: [Element] = []
        var line: Int
        var column: Int

        func attribute(_ name: String) -> String? { attributes[name].map { ByteTrim.string($0) } }
        var value: String { ByteTrim.string(text) }
    }

    enum Version { case v3, v4 }

    enum Document {
        /// The elements kept in the tree, by local name; any other (and all inside it) is skipped.
        static let kept: Set<String> = ["metalink", "files", "file", "size", "hash", "pieces", "url", "verification", "resources"]
        /// The elements whose text is kept.
        static let withText: Set<String> = ["size", "hash", "url"]

        /// The root `<metalink>` of `data`, with the version its namespace names.
        static func read(_ data: Data, origin: String) throws -> (element: Element, version: Version) {
            func refuse(_ message: String, _ fix: String, line: Int? = nil, column: Int? = nil) -> JobFileError {
                JobFileError(file: origin, line: line, column: column, message: message, fix: fix)
            }
            guard data.count <= maxSize else {
                throw refuse("the metalink is \(data.count) bytes, more than the \(maxSize >> 20) MiB one may be",
                             "split it into several smaller metalinks")
            }
            // Before the parser sees anything: a document type could declare entities (expanded, or loaded from
            // outside), and metalinks have none.
            if containsCaseless("<!DOCTYPE", in: data) {
                throw refuse("the metalink has a document type declaration (<!DOCTYPE …>); metalinks have none and it is not read",
                             "remove the <!DOCTYPE …> declaration")
            }
            if containsCaseless("<!ENTITY", in: data) {
                throw refuse("the metalink has an entity declaration (<!ENTITY …>); entities are not expanded",
                             "remove the <!ENTITY …> declaration and write the text it stood for")
            }
            // UTF-8 only: no other encoding can hide a declaration from the checks above (UTF-16's zero bytes,
            // an encoding the declaration names), and FoundationXML traps on an element name that is not UTF-8.
            guard String(data: data, encoding: .utf8) != nil else {
                throw refuse("the metalink is not UTF-8 text", "save the metalink as UTF-8")
            }
            if data.contains(0) {
                throw refuse("the metalink holds a NUL byte (UTF-16 or binary data?)", "save the metalink as UTF-8")
            }
            // A byte-order mark, then white space before the XML declaration (which libxml2 refuses there):
            // skipped, the lines counted so that positions still name lines of the file.
            var start = data.startIndex
            if data.starts(with: [0xEF, 0xBB, 0xBF]) { start += 3 }
            guard data[start...].contains(where: { !ByteTrim.isSpace($0) }) else {
                throw refuse("the metalink is empty", "give a Metalink 4 (.meta4) or Metalink 3 (.metalink) document")
            }
            var skippedLines = 0
            while start < data.endIndex, ByteTrim.isSpace(data[start]) {
                if data[start] == 0x0A { skippedLines += 1 }
                start += 1
            }
            var rest = start
            let body = data[start...]
            if body.starts(with: Array("<?xml".utf8)), body.count > 5, ByteTrim.isSpace(body[body.startIndex + 5]) {
                let (line, column) = position(of: start, in: data)
                guard let end = S3XMLElement.find(Array("?>".utf8), in: body) else {
                    throw refuse("the metalink's XML declaration (<?xml …) is not closed by \"?>\"",
                                 "end the declaration with \"?>\"", line: line, column: column)
                }
                // A declaration holds no markup: one that runs into a tag was never closed where it ended.
                if body[body.startIndex..<end].dropFirst(2).contains(where: { $0 == UInt8(ascii: "<") || $0 == UInt8(ascii: ">") }) {
                    throw refuse("the metalink's XML declaration (<?xml …) is not closed by \"?>\" before the first tag",
                                 "end the declaration with \"?>\"", line: line, column: column)
                }
                let declaration = String(decoding: body[body.startIndex..<end], as: UTF8.self)
                if let encoding = declaredEncoding(declaration),
                   !["utf-8", "utf8", "us-ascii", "ascii"].contains(encoding.lowercased()) {
                    throw refuse("the metalink declares the encoding \(shown(encoding)); only UTF-8 is read",
                                 "save the metalink as UTF-8 and declare encoding=\"UTF-8\" (or no encoding)",
                                 line: line, column: column)
                }
                rest = end + 2
            }
            // FoundationXML's handler reads a processing instruction's data with strlen, and libxml2 hands it
            // NULL for one without data (`<?x?>`), which crashes the process: none reaches the parser.
            if let at = S3XMLElement.find(Array("<?".utf8), in: data[rest...]) {
                let (line, column) = position(of: at, in: data)
                throw refuse("the metalink has a processing instruction (<?…?>) after the XML declaration; metalinks have none",
                             "remove the processing instruction", line: line, column: column)
            }

            let parser = XMLParser(data: Data(data[start...]))
            parser.shouldProcessNamespaces = true
            parser.shouldReportNamespacePrefixes = false
            parser.shouldResolveExternalEntities = false
            let builder = Builder(lineOffset: skippedLines)
            parser.delegate = builder
            let parsed = parser.parse()
            if builder.declaration {
                throw refuse("the metalink declares an entity or a document type; metalinks have none and it is not read",
                             "remove the declaration")
            }
            guard parsed, builder.failure == nil, let root = builder.root else {
                // XMLParser's line 0 is nowhere (a document it could not start): no position then.
                let (line, column) = builder.failedAt ?? (parser.lineNumber, parser.columnNumber)
                var what = "not well-formed XML"
                if let error = builder.failure ?? parser.parserError {
                    let code = (error as NSError).code
                    what += " (XMLParser error \(code)\(XMLErrorNames.name(code).map { ": " + $0 } ?? ""))"
                } else {
                    what += " (it ends before its root element is closed)"
                }
                throw refuse("the metalink is \(what)",
                             "correct the XML there: an element left open or closed twice, a bare & or < in a value (write &amp; and &lt;), a missing quote",
                             line: line > 0 ? line + skippedLines : nil, column: line > 0 ? column : nil)
            }
            guard root.element.name == "metalink" else {
                throw refuse("the root element is <\(TerminalText.escaped(String(root.element.name.prefix(100))))>, not <metalink>: this is not a metalink",
                             "give a Metalink 4 (<metalink xmlns=\"\(namespace4)\">) or Metalink 3 (<metalink xmlns=\"\(namespace3)\" version=\"3.0\">) document",
                             line: root.element.line, column: root.element.column)
            }
            switch root.namespace.flatMap({ $0.isEmpty ? nil : $0 }) {
            case namespace4: return (root.element, .v4)
            case namespace3: return (root.element, .v3)
            default:
                let named = root.namespace.flatMap({ $0.isEmpty ? nil : $0 }).map { "the namespace \(shown($0))" } ?? "no namespace"
                throw refuse("the <metalink> root element has \(named), neither Metalink 4's nor Metalink 3's",
                             "declare xmlns=\"\(namespace4)\" (Metalink 4) or xmlns=\"\(namespace3)\" (Metalink 3.0)",
                             line: root.element.line, column: root.element.column)
            }
        }

        /// The 1-based line and column (in bytes) of `index` in `data`.
        static func position(of index: Data.Index, in data: Data) -> (line: Int, column: Int) {
            let before = data[data.startIndex..<index]
            let line = 1 + before.reduce(0) { $0 + ($1 == 0x0A ? 1 : 0) }
            let lineStart = before.lastIndex(of: 0x0A).map { $0 + 1 } ?? data.startIndex
            return (line, index - lineStart + 1)
        }

        /// Whether `needle` (ASCII) occurs in `data`, its letters in either case.
        static func containsCaseless(_ needle: String, in data: Data) -> Bool {
            let pattern = Array(needle.utf8)
            guard !pattern.isEmpty, data.count >= pattern.count else { return false }
            func isLetter(_ byte: UInt8) -> Bool { (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) }
            return data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) -> Bool in
                var index = 0
                while index <= bytes.count - pattern.count {
                    var offset = 0
                    while offset < pattern.count {
                        let byte = bytes[index + offset], wanted = pattern[offset]
                        guard isLetter(wanted) ? byte | 0x20 == wanted | 0x20 : byte == wanted else { break }
                        offset += 1
                    }
                    if offset == pattern.count { return true }
                    index += 1
                }
                return false
            }
        }

        /// The value of `encoding="…"` in an XML declaration's text.
        static func declaredEncoding(_ declaration: String) -> String? {
            guard let key = declaration.range(of: "encoding") else { return nil }
            var rest = declaration[key.upperBound...].drop { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\n" }
            guard rest.first == "=" else { return nil }
            rest = rest.dropFirst().drop { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\n" }
            guard let quote = rest.first, quote == "\"" || quote == "'" else { return nil }
            let value = rest.dropFirst().prefix { $0 != quote }
            return String(value)
        }

        /// Collects the kept elements from the parser's events (one document, on the calling thread).
        private final class Builder: NSObject, XMLParserDelegate {
            let lineOffset: Int
            var stack: [(element: Element, namespace: String?)] = []
            var root: (element: Element, namespace: String?)?
            /// How deep inside a skipped element the parser is (0: not inside one).
            var skipping = 0
            var failure: Error?
            var failedAt: (line: Int, column: Int)?
            var declaration = false

            init(lineOffset: Int) { self.lineOffset = lineOffset }

            func parser(_ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
                        qualifiedName: String?, attributes: [String: String] = [:]) {
                if skipping > 0 { skipping += 1; return }
                // Inside the root, only the root's own namespace counts: another's `<url>` is an extension's.
                if let top = stack.first, namespaceURI != top.namespace || !Document.kept.contains(elementName) {
                    skipping = 1
                    return
                }
                if root != nil { skipping = 1; return }  // a second root cannot happen in well-formed XML
                stack.append((Element(name: elementName, attributes: attributes, line: parser.lineNumber + lineOffset,
                                      column: parser.columnNumber), namespaceURI))
            }

            func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
                if skipping > 0 { skipping -= 1; return }
                guard let done = stack.popLast() else { return }
                if stack.isEmpty { root = done } else { stack[stack.count - 1].element.children.append(done.element) }
            }

            func parser(_ parser: XMLParser, foundCharacters string: String) { keep(string) }

            func parser(_ parser: XMLParser, foundCDATA CDATABlock: Data) { keep(String(decoding: CDATABlock, as: UTF8.self)) }

            private func keep(_ text: String) {
                guard skipping == 0, let top = stack.last, Document.withText.contains(top.element.name) else { return }
                stack[stack.count - 1].element.text += text
            }

            func parser(_ parser: XMLParser, foundInternalEntityDeclarationWithName name: String, value: String?) {
                declaration = true
                parser.abortParsing()
            }

            func parser(_ parser: XMLParser, foundExternalEntityDeclarationWithName name: String, publicID: String?, systemID: String?) {
                declaration = true
                parser.abortParsing()
            }

            func parser(_ parser: XMLParser, resolveExternalEntityName name: String, systemID: String?) -> Data? {
                declaration = true
                parser.abortParsing()
                return nil
            }

            func parser(_ parser: XMLParser, parseErrorOccurred parseError: Error) {
                guard failure == nil else { return }
                failure = parseError
                // Where the parser is now: after parse() returns it may have read on.
                failedAt = (parser.lineNumber, parser.columnNumber)
            }
        }
    }

    /// Short names for the errors a broken metalink most often gives. FoundationXML reports libxml2's own
    /// codes (`xmlParserErrors`), which are not `XMLParser.ErrorCode`'s raw values on Linux.
    enum XMLErrorNames {
        static func name(_ code: Int) -> String? {
            switch code {
            case 3: "no element where the document should start"
            case 4: "the document is empty"
            case 5, 86: "the document ends inside an element, or goes on after its root element"
            case 8, 9: "a character XML does not allow"
            case 22, 23, 26: "a bad entity reference (a bare &?)"
            case 38: "\"<\" in an attribute value"
            case 39, 40, 41, 42: "a bad attribute (a missing quote or value, or one given twice)"
            case 68: "a name expected"
            case 72: "\"<\" expected"
            case 73: "\">\" expected"
            case 76: "an end tag does not match its start tag"
            case 77: "an element is not closed"
            case 85: "tags not balanced"
            case 201: "an undeclared namespace prefix"
            default: nil
            }
        }
    }
}

// MARK: Reading the files

extension Metalink {
    /// What each `<file>` says, checked.
    struct Reader {
        let origin: String
        let root: Element
        let version: Version

        init(origin: String, root: (element: Element, version: Version)) {
            self.origin = origin
            self.root = root.element
            version = root.version
        }

        func refuse(_ element: Element?, field: String? = nil, _ message: String, _ fix: String) -> JobFileError {
            JobFileError(file: origin, field: field, line: element?.line, column: element?.column, message: message, fix: fix)
        }

        func files() throws -> [MetalinkFile] {
            // Metalink 4 lists <file> under the root, Metalink 3 under <files>; each is read under either.
            var elements: [Element] = []
            for child in root.children {
                if child.name == "file" { elements.append(child) }
                if child.name == "files" { elements += child.children.filter { $0.name == "file" } }
            }
            guard !elements.isEmpty else {
                throw refuse(root, "the metalink describes no file (no <file> element\(version == .v3 ? " in <files>" : ""))",
                             version == .v3 ? "list each file as <files><file name=\"…\">…</file></files>"
                                            : "list each file as <file name=\"…\">…</file> inside <metalink>")
            }
            var files: [MetalinkFile] = []
            var names: Set<String> = []
            for element in elements {
                let file = try self.file(element)
                guard names.insert(file.name).inserted else {
                    throw refuse(element, field: "name", "two files are named \(shown(file.name))",
                                 "give each <file> its own name, or remove the repeated one")
                }
                files.append(file)
            }
            return files
        }

        /// The children of `file` named `name`, directly or inside `<verification>` or `<resources>`
        /// (where Metalink 3 puts them), in document order.
        func items(_ name: String, of file: Element) -> [Element] {
            var found: [Element] = []
            for child in file.children {
                if child.name == name { found.append(child) }
                if child.name == "verification" || child.name == "resources" { found += child.children.filter { $0.name == name } }
            }
            return found
        }

        func file(_ element: Element) throws -> MetalinkFile {
            guard let name = element.attribute("name") else {
                throw refuse(element, field: "name", "a <file> has no name",
                             "give each <file> a name=\"…\" attribute: the relative path to save it as")
            }
            if let reason = unsafeName(name) {
                throw refuse(element, field: "name", "the file name \(shown(name)) is not a safe relative path: \(reason)",
                             "name the file with a relative path of plain components (a/b.iso), at most \(maxNameBytes) bytes")
            }
            let what = "file \(shown(name))"
            var file = MetalinkFile(name: name, urls: [])

            if let sizeElement = element.children.first(where: { $0.name == "size" }) {
                let text = sizeElement.value
                guard let size = wholeNumber(text) else {
                    let problem = text.hasPrefix("-") && wholeNumber(String(text.dropFirst())) != nil ? "is negative"
                        : text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) && !text.isEmpty ? "is too large" : "is not a whole number"
                    throw refuse(sizeElement, field: "size", "\(what): the size \(shown(text)) \(problem)",
                                 "write the file's size in bytes, digits only (<size>1048576</size>), or leave <size> out")
                }
                file.size = size
            }

            for hash in items("hash", of: element) {
                guard let type = hash.attribute("type") else { continue }
                let algorithm = canonicalAlgorithm(type)
                guard let digits = hexLength[algorithm] else { continue }
                let text = hash.value
                guard digest(text, hexDigits: digits) != nil else {
                    throw refuse(hash, field: "hash", "\(what): the \(algorithm) hash \(shown(text)) is not \(digits) hex digits",
                                 "write the \(algorithm) digest in hexadecimal, \(digits) digits (0-9, a-f), or leave the <hash> out")
                }
                if algorithm == "sha-256" {
                    let lower = text.lowercased()
                    if let known = file.sha256, known != lower {
                        throw refuse(hash, field: "hash", "\(what): two different sha-256 hashes (\(known) and \(lower))",
                                     "keep the one sha-256 hash that is right")
                    }
                    file.sha256 = lower
                }
            }

            var sha1Pieces: PieceHashes?
            var sha256Pieces: PieceHashes?
            for piecesElement in items("pieces", of: element) {
                guard let pieces = try self.pieces(piecesElement, size: file.size, what: what) else { continue }
                switch pieces.algorithm {
                case .sha1: if sha1Pieces == nil { sha1Pieces = pieces }
                case .sha256: if sha256Pieces == nil { sha256Pieces = pieces }
                }
            }
            file.pieces = sha256Pieces ?? sha1Pieces

            file.urls = try urls(items("url", of: element), file: element, what: what)
            return file
        }

        /// The piece hashes of one `<pieces>`; nil for an algorithm other than sha-1 and sha-256.
        func pieces(_ element: Element, size: Int64?, what: String) throws -> PieceHashes? {
            guard let type = element.attribute("type"),
                  let algorithm = PieceHashes.Algorithm(rawValue: canonicalAlgorithm(type)) else { return nil }
            let lengthText = element.attribute("length") ?? ""
            guard let length = wholeNumber(lengthText), length > 0 else {
                throw refuse(element, field: "pieces", "\(what): the piece length \(shown(lengthText)) is not a positive whole number",
                             "give <pieces> a length=\"…\" attribute: the bytes in each piece, such as 262144")
            }
            guard length <= maxPieceLength else {
                throw refuse(element, field: "pieces", "\(what): the piece length \(length) is more than 1 GiB (\(maxPieceLength) bytes)",
                             "use pieces of at most 1 GiB, or leave the <pieces> out")
            }
            let hashElements = element.children.filter { $0.name == "hash" }
            guard hashElements.count <= maxPieces else {
                throw refuse(element, field: "pieces", "\(what): \(hashElements.count) piece hashes, more than the \(maxPieces) read",
                             "use longer pieces, or leave the <pieces> out")
            }
            let digits = algorithm.digestLength * 2
            var hashes: [[UInt8]] = []
            hashes.reserveCapacity(hashElements.count)
            for (index, hash) in hashElements.enumerated() {
                if let piece = hash.attribute("piece"), wholeNumber(piece) != Int64(index) {
                    throw refuse(hash, field: "pieces", "\(what): piece hash \(index) says piece=\(shown(piece))",
                                 "list the piece hashes in order, numbered from 0")
                }
                let text = hash.value
                guard let digest = digest(text, hexDigits: digits) else {
                    throw refuse(hash, field: "pieces", "\(what): piece hash \(index), \(shown(text)), is not \(digits) hex digits (\(algorithm.rawValue))",
                                 "write each piece's \(algorithm.rawValue) digest in hexadecimal, \(digits) digits")
                }
                hashes.append(digest)
            }
            if let size {
                let expected = size / length + (size % length == 0 ? 0 : 1)
                guard Int64(hashes.count) == expected else {
                    throw refuse(element, field: "pieces",
                                 "\(what): \(hashes.count) piece hashes of \(length) bytes each, but a file of \(size) bytes has \(expected) pieces",
                                 "give one hash for each piece (the last may be shorter), or correct the <size>")
                }
            } else if hashes.isEmpty {
                throw refuse(element, field: "pieces", "\(what): <pieces> lists no hash",
                             "give one <hash> for each piece, or leave the <pieces> out")
            }
            return PieceHashes(algorithm: algorithm, length: length, hashes: hashes)
        }

        /// The http(s) URLs of `elements`, best first, without repeats. A priority or preference that is not a
        /// whole number counts as none; a Metalink 3 <url> whose `type` is not http or https (ftp, bittorrent) is
        /// skipped whatever its address; an http(s) URL with user info is refused (one of another scheme is skipped).
        func urls(_ elements: [Element], file: Element, what: String) throws -> [URL] {
            var candidates: [(url: URL, rank: Int64?)] = []
            var skipped: [String] = []
            for element in elements {
                let text = element.value
                // Metalink 3 says what a <url> is: one of type="bittorrent" is a torrent, not the file.
                if version == .v3, let type = element.attribute("type")?.lowercased(), type != "http", type != "https" {
                    let named = TerminalText.escaped(String(type.prefix(20)))
                    if !skipped.contains(named) { skipped.append(named) }
                    continue
                }
                let scheme = text.prefix { $0 != ":" }.lowercased()
                guard scheme == "http" || scheme == "https", text.contains(":") else {
                    let named = text.contains(":") ? TerminalText.escaped(String(scheme.prefix(20))) : "no scheme"
                    if !skipped.contains(named) { skipped.append(named) }
                    continue
                }
                guard let url = URL(string: text), let host = url.host, !host.isEmpty,
                      url.scheme?.lowercased() == scheme else {
                    throw refuse(element, field: "url", "\(what): the URL \(shown(Redaction.url(string: text))) is not a valid \(scheme) URL",
                                 "write a whole URL (https://host/path), with spaces and other special characters percent-encoded")
                }
                if url.user != nil || url.password != nil {
                    throw refuse(element, field: "url", "\(what): the URL \(shown(Redaction.url(string: text))) holds a user name or password",
                                 "take the user info out of the URL; give credentials in a .netrc file or in the job's headers")
                }
                // Metalink 4: priority 1 is best; Metalink 3: the highest preference is. Absent (or unreadable) is last.
                let rank: Int64? = switch version {
                case .v4: element.attribute("priority").flatMap(wholeNumber)
                case .v3: element.attribute("preference").flatMap(wholeNumber).map { -$0 }
                }
                candidates.append((url, rank))
            }
            // A stable sort: document order among equals.
            let ordered = candidates.enumerated().sorted { a, b in
                switch (a.element.rank, b.element.rank) {
                case let (x?, y?): x != y ? x < y : a.offset < b.offset
                case (.some, nil): true
                case (nil, .some): false
                case (nil, nil): a.offset < b.offset
                }
            }
            var seen: Set<String> = []
            let urls = ordered.map(\.element.url).filter { seen.insert($0.absoluteString).inserted }
            guard !urls.isEmpty else {
                let others = skipped.isEmpty ? "" : " (\(elements.count) other \(elements.count == 1 ? "source" : "sources") skipped: \(skipped.joined(separator: ", ")))"
                throw refuse(file, field: "url", "\(what) has no http or https URL\(others)",
                             "add a <url> with an http:// or https:// address; ftp, magnet and torrent sources are not fetched")
            }
            return urls
        }
    }
}
