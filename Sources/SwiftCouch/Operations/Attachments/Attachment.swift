import Foundation

/// One entry of a document's `_attachments`: inline data to write, a stub read back (or sent back
/// to keep an attachment), or a `follows` placeholder for a `multipart/related` upload.
///
/// ```swift
/// var doc = CouchDocument(id: "report", body: Report(...))
/// doc.attachments = ["chart.png": .inline(pngData, contentType: "image/png")]
/// ```
/// To keep existing attachments on an update, send their stubs back unchanged: CouchDB drops
/// every attachment that a new revision does not mention.
public struct Attachment: Codable, Sendable, Hashable {
    /// The MIME type (`content_type`).
    public var contentType: String?
    /// The bytes (`data`, base64 in JSON): set for inline writes and for reads with
    /// `attachments=true`; nil for stubs.
    public var data: Data?
    /// True for a stub: the attachment exists but its bytes were not included.
    public var stub: Bool?
    /// True when the bytes follow in a later MIME part (`multipart/related` writes and reads).
    public var follows: Bool?
    /// `md5-<base64>` of the stored bytes.
    public var digest: String?
    /// The length in bytes of the decoded content.
    public var length: Int?
    /// The generation of the revision that last changed this attachment.
    public var revpos: Int?
    /// How CouchDB stores it (`gzip`), with `att_encoding_info=true`.
    public var encoding: String?
    /// The stored (encoded) length, with `att_encoding_info=true`.
    public var encodedLength: Int?

    public init(
        contentType: String? = nil, data: Data? = nil, stub: Bool? = nil, follows: Bool? = nil, digest: String? = nil,
        length: Int? = nil, revpos: Int? = nil, encoding: String? = nil, encodedLength: Int? = nil
    ) {
        self.contentType = contentType
        self.data = data
        self.stub = stub
        self.follows = follows
        self.digest = digest
        self.length = length
        self.revpos = revpos
        self.encoding = encoding
        self.encodedLength = encodedLength
    }

    /// An attachment written inline as base64 in the document's JSON.
    public static func inline(_ data: Data, contentType: String) -> Attachment {
        Attachment(contentType: contentType, data: data)
    }

    /// A stub that keeps an existing attachment unchanged on an update.
    public static var keep: Attachment { Attachment(stub: true) }

    enum CodingKeys: String, CodingKey {
        case data, stub, follows, digest, length, revpos, encoding
        case contentType = "content_type"
        case encodedLength = "encoded_length"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        contentType = try container.decodeIfPresent(String.self, forKey: .contentType)
        if let base64 = try container.decodeIfPresent(String.self, forKey: .data) {
            guard let bytes = Data(base64Encoded: base64) else {
                throw DecodingError.dataCorruptedError(
                    forKey: .data, in: container, debugDescription: "Attachment data is not valid base64")
            }
            data = bytes
        }
        stub = try container.decodeIfPresent(Bool.self, forKey: .stub)
        follows = try container.decodeIfPresent(Bool.self, forKey: .follows)
        digest = try container.decodeIfPresent(String.self, forKey: .digest)
        length = try container.decodeIfPresent(Int.self, forKey: .length)
        revpos = try container.decodeIfPresent(Int.self, forKey: .revpos)
        encoding = try container.decodeIfPresent(String.self, forKey: .encoding)
        encodedLength = try container.decodeIfPresent(Int.self, forKey: .encodedLength)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(contentType, forKey: .contentType)
        try container.encodeIfPresent(data?.base64EncodedString(), forKey: .data)
        try container.encodeIfPresent(stub, forKey: .stub)
        try container.encodeIfPresent(follows, forKey: .follows)
        try container.encodeIfPresent(digest, forKey: .digest)
        try container.encodeIfPresent(length, forKey: .length)
        try container.encodeIfPresent(revpos, forKey: .revpos)
        try container.encodeIfPresent(encoding, forKey: .encoding)
        try container.encodeIfPresent(encodedLength, forKey: .encodedLength)
    }
}
