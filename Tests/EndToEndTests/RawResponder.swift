import Foundation
@testable import SwiftCouch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A listening TCP socket on 127.0.0.1, on a port the system chooses: its descriptor and port.
/// `receiveBufferSize` shrinks the receive buffer the accepted sockets inherit.
func openLoopbackListener(backlog: Int32, receiveBufferSize: Int32? = nil) throws -> (fd: Int32, port: Int) {
    let fd = socket(AF_INET, ClientSocket.streamType, 0)
    var one: Int32 = 1
    _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    if var size = receiveBufferSize {
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard bound == 0, listen(fd, backlog) == 0 else {
        _ = close(fd)
        throw URLError(.cannotConnectToHost)
    }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

/// A listening socket on 127.0.0.1 (port chosen by the system) that answers every connection with
/// a script writing raw bytes: for the response shapes a `RequestHandler` cannot make (interim
/// `1xx` responses, a head or body trickled byte by byte, a body whose framing lies).
final class RawResponder: @unchecked Sendable {
    // @unchecked Sendable: `listener`, `port` and `script` are immutable; the connection table and
    // `stopped` are only touched under `lock`.
    let port: Int
    private let listener: Int32
    private let script: @Sendable (RawPeer) -> Void
    private let lock = NSLock()
    private var peers: [RawPeer] = []
    private var stopped = false
    private var heads: [String] = []

    init(script: @escaping @Sendable (RawPeer) -> Void) throws {
        _ = signal(SIGPIPE, SIG_IGN)
        (listener, port) = try openLoopbackListener(backlog: 16)
        self.script = script
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// `http://127.0.0.1:port/path`.
    func url(_ path: String = "/") -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

    /// The request heads read so far (lowercased), in order.
    var requestHeads: [String] { lock.withLock { heads } }

    /// Closes the listener and every connection; scripts still writing see their writes fail.
    func stop() {
        let open = lock.withLock { () -> [RawPeer] in
            stopped = true
            return peers
        }
        _ = shutdown(listener, Int32(SHUT_RDWR))
        _ = close(listener)
        for peer in open { peer.close() }
    }

    private func acceptLoop() {
        while true {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            let peer = RawPeer(fd: connection)
            let accepted = lock.withLock { () -> Bool in
                guard !stopped else { return false }
                peers.append(peer)
                return true
            }
            guard accepted else {
                peer.close()
                return
            }
            Thread.detachNewThread { [self] in
                if let head = peer.readHead() {
                    lock.withLock { heads.append(head.lowercased()) }
                    script(peer)
                }
                peer.close()
            }
        }
    }
}

/// One accepted connection, as a script sees it.
final class RawPeer: @unchecked Sendable {
    // @unchecked Sendable: `fd` is immutable; `closed` is only touched under `lock`.
    private let fd: Int32
    private let lock = NSLock()
    private var closed = false

    init(fd: Int32) { self.fd = fd }

    #if canImport(Glibc)
        private static let noSignal = Int32(MSG_NOSIGNAL)
    #else
        private static let noSignal: Int32 = 0
    #endif

    /// Reads the request head (up to the empty line); nil when the connection ends first.
    func readHead() -> String? {
        var pending: [UInt8] = []
        var byte: UInt8 = 0
        while !pending.suffix(4).elementsEqual([13, 10, 13, 10]) {
            guard recv(fd, &byte, 1, 0) == 1 else { return nil }
            pending.append(byte)
            if pending.count > 65_536 { return nil }
        }
        return String(decoding: pending, as: UTF8.self)
    }

    /// Writes every byte; false when the connection is gone.
    @discardableResult
    func write(_ data: Data) -> Bool {
        guard !lock.withLock({ closed }) else { return false }
        var sent = 0
        while sent < data.count {
            let count = data[data.startIndex + sent..<data.endIndex].withUnsafeBytes {
                send(fd, $0.baseAddress, $0.count, RawPeer.noSignal)
            }
            guard count > 0 else { return false }
            sent += count
        }
        return true
    }

    /// Writes `text` as UTF-8.
    @discardableResult
    func write(_ text: String) -> Bool { write(Data(text.utf8)) }

    /// Writes `data` one byte at a time, `pause` seconds apart; false when the connection is gone.
    @discardableResult
    func trickle(_ data: Data, pause: TimeInterval) -> Bool {
        for byte in data {
            guard write(Data([byte])) else { return false }
            Thread.sleep(forTimeInterval: pause)
        }
        return true
    }

    /// Closes the connection (once).
    func close() {
        let first = lock.withLock { () -> Bool in
            defer { closed = true }
            return !closed
        }
        guard first else { return }
        _ = shutdown(fd, Int32(SHUT_RDWR))
        #if canImport(Glibc)
            _ = Glibc.close(fd)
        #else
            _ = Darwin.close(fd)
        #endif
    }
}
