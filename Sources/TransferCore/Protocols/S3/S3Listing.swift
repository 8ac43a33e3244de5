import Foundation

/// One object in a listing.
package struct S3ListedObject: Sendable, Equatable, Codable {
    package var key: String
    package var size: Int64
    /// As listed, quotes removed: a plain MD5 in hex, or `MD5-N` for a multipart object.
    package var etag: String

    package init(key: String, size: Int64, etag: String) {
        self.key = key
        self.size = size
        self.etag = etag
    }
}

/// One page of ListObjectsV2: up to `max-keys` objects and where the next page starts.
package struct S3ListPage: Sendable, Equatable {
    package var objects: [S3ListedObject]
    /// Where the next page starts: a continuation token, or (from a server that
    /// sends none although the page is truncated) the last key, for `start-after`.
    package var next: S3ListCursor?

    package init(objects: [S3ListedObject], next: S3ListCursor?) {
        self.objects = objects
        self.next = next
    }

    /// Reads a ListObjectsV2 answer asked with `encoding-type=url` (keys come
    /// percent-encoded, `+` for a space: a key may hold characters XML cannot).
    package static func parse(_ body: String) throws -> S3ListPage {
        guard let root = S3XMLElement.parse(body), root.name == "ListBucketResult" else {
            throw S3Error.verification("ListObjectsV2 answered with something that is not a ListBucketResult: "
                                       + HTTPHeaders.visible(String(body.prefix(300))))
        }
        let encoded = root.value("EncodingType")?.lowercased() == "url"
        var objects: [S3ListedObject] = []
        for item in root.children("Contents") {
            guard let rawKey = item.child("Key")?.text, let size = item.value("Size").flatMap(Int64.init), size >= 0 else {
                throw S3Error.verification("ListObjectsV2 listed an object without a key or a size: "
                                           + HTTPHeaders.visible(String(body.prefix(300))))
            }
            guard let key = encoded ? Self.decodeKey(rawKey) : rawKey else {
                throw S3Error.verification("ListObjectsV2 listed a key that is not valid percent-encoded UTF-8: "
                                           + HTTPHeaders.visible(rawKey))
            }
            let etag = Self.unquoted(item.value("ETag") ?? "")
            objects.append(S3ListedObject(key: key, size: size, etag: etag))
        }
        var next: S3ListCursor?
        if root.value("IsTruncated") == "true" {
            if let token = root.child("NextContinuationToken")?.text, !token.isEmpty {
                next = .token(token)
            } else if let last = objects.last?.key {
                next = .startAfter(last)
            } else {
                throw S3Error.verification("ListObjectsV2 said the listing goes on but gave no continuation token and no key")
            }
        }
        return S3ListPage(objects: objects, next: next)
    }

    /// An ETag without the double quotes around it (any number of them, at either end).
    static func unquoted(_ text: String) -> String { ByteTrim.string(text, dropping: { $0 == UInt8(ascii: "\"") }) }

    /// `a+b%2Bc%C3%A9` → `a b+cé` (form encoding, as S3 writes keys with `encoding-type=url`).
    static func decodeKey(_ text: String) -> String? {
        text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }
}

/// Where a listing resumes.
package enum S3ListCursor: Sendable, Hashable, Codable {
    case token(String)
    case startAfter(String)
}

extension S3Client {
    /// One page of the objects whose keys start with `prefix` (ListObjectsV2,
    /// `encoding-type=url`), from `cursor` (nil: the first page).
    package func listObjects(bucket: String, prefix: String, cursor: S3ListCursor?, maxKeys: Int = 1000) async throws -> S3ListPage {
        // Query parameters in name order, encoded as SigV4 canonicalises them.
        var items: [(String, String)] = [("encoding-type", "url"), ("list-type", "2"), ("max-keys", String(maxKeys))]
        switch cursor {
        case .token(let token): items.append(("continuation-token", token))
        case .startAfter(let key): items.append(("start-after", key))
        case nil: break
        }
        if !prefix.isEmpty { items.append(("prefix", prefix)) }
        let query = items.sorted { $0.0 < $1.0 }.map { "\($0.0)=\(AWSEncoding.encode($0.1))" }.joined(separator: "&")
        // 1,000 keys of up to 1,024 bytes, URL-encoded (up to three times longer), with their XML: up to about 4 MiB.
        let response = try await send("ListObjectsV2", method: "GET", bucket: bucket, key: "", query: query,
                                      responseLimit: 8 << 20)
        return try S3ListPage.parse(response.body)
    }

    /// Every object whose key starts with `prefix`, a page at a time (`body` per page, in
    /// key order); throws when the server gives back a continuation it gave before.
    package func forEachListedPage(bucket: String, prefix: String, _ body: ([S3ListedObject]) throws -> Void) async throws {
        var cursor: S3ListCursor?
        var seen: Set<S3ListCursor> = []
        repeat {
            let page = try await listObjects(bucket: bucket, prefix: prefix, cursor: cursor)
            try body(page.objects)
            if let cursor { seen.insert(cursor) }
            if let next = page.next, seen.contains(next) {
                throw S3Error.verification("ListObjectsV2 answered with a continuation it had given before; "
                                           + "the listing would never end")
            }
            cursor = page.next
        } while cursor != nil
    }
}

/// One page of ListMultipartUploads: the uploads still open, and where the next page starts.
struct S3OpenUploadsPage: Sendable {
    var uploads: [(key: String, uploadID: String)]
    /// `key-marker` and `upload-id-marker` of the next page (nil: the last page).
    var next: (keyMarker: String, uploadIDMarker: String)?

    static func parse(_ body: String) throws -> S3OpenUploadsPage {
        guard let root = S3XMLElement.parse(body), root.name == "ListMultipartUploadsResult" else {
            throw S3Error.verification("ListMultipartUploads answered with something that is not a ListMultipartUploadsResult: "
                                       + HTTPHeaders.visible(String(body.prefix(300))))
        }
        let uploads = root.children("Upload").compactMap { upload -> (key: String, uploadID: String)? in
            guard let key = upload.child("Key")?.text, let id = upload.value("UploadId"), !id.isEmpty else { return nil }
            return (key, id)
        }
        var next: (keyMarker: String, uploadIDMarker: String)?
        if root.value("IsTruncated") == "true" {
            guard let keyMarker = root.child("NextKeyMarker")?.text, let idMarker = root.value("NextUploadIdMarker"),
                  !(keyMarker.isEmpty && idMarker.isEmpty) else {
                throw S3Error.verification("ListMultipartUploads said the listing goes on but gave no marker")
            }
            next = (keyMarker, idMarker)
        }
        return S3OpenUploadsPage(uploads: uploads, next: next)
    }
}

extension S3Client {
    /// The ids of the multipart uploads open for exactly `key` (follows pagination, at most 100 pages).
    package func openUploads(bucket: String, key: String) async throws -> [String] {
        var ids: [String] = []
        var marker: (keyMarker: String, uploadIDMarker: String)?
        for _ in 0..<100 {
            var items: [(String, String)] = [("prefix", key), ("uploads", "")]
            if let marker {
                items += [("key-marker", marker.keyMarker), ("upload-id-marker", marker.uploadIDMarker)]
            }
            let query = items.sorted { $0.0 < $1.0 }.map { "\($0.0)=\(AWSEncoding.encode($0.1))" }.joined(separator: "&")
            let response = try await send("ListMultipartUploads", method: "GET", bucket: bucket, key: "", query: query,
                                          responseLimit: 8 << 20)
            let page = try S3OpenUploadsPage.parse(response.body)
            ids += page.uploads.filter { $0.key == key }.map(\.uploadID)
            guard let next = page.next, next.keyMarker != marker?.keyMarker || next.uploadIDMarker != marker?.uploadIDMarker else {
                break
            }
            marker = next
        }
        return ids
    }
}
