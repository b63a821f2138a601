/// A first-in, first-out queue over one array and a moving head: taking from the front is O(1),
/// and the taken prefix is dropped when the queue empties, or once it is more than half of the
/// array (past 1,024 elements), so memory follows what is still queued.
struct FIFO<Element> {
    private var elements: [Element] = []
    private var head = 0

    /// How many elements are queued.
    var count: Int { elements.count - head }
    var isEmpty: Bool { count == 0 }

    mutating func append(_ element: Element) { elements.append(element) }

    mutating func append(contentsOf more: some Sequence<Element>) { elements.append(contentsOf: more) }

    /// Appends `more`; when the queue is empty it becomes the queue's storage as it is, with no
    /// element copied (rows handed over a chunk at a time).
    mutating func append(contentsOf more: consuming [Element]) {
        if isEmpty {
            elements = more
            head = 0
        } else {
            elements.append(contentsOf: more)
        }
    }

    /// The oldest element, taken; nil when empty.
    mutating func popFirst() -> Element? {
        guard head < elements.count else { return nil }
        let element = elements[head]
        head += 1
        compact()
        return element
    }

    /// The oldest `limit` elements (fewer when fewer are queued), taken.
    mutating func popFirst(_ limit: Int) -> [Element] {
        if head == 0, elements.count <= limit {
            // All of it: the storage itself is handed over, with no element copied.
            defer { elements = [] }
            return elements
        }
        let taken = Array(elements[head..<(head + Swift.min(count, limit))])
        head += taken.count
        compact()
        return taken
    }

    private mutating func compact() {
        if head == elements.count {
            elements.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 1_024, head * 2 > elements.count {
            elements.removeFirst(head)
            head = 0
        }
    }
}

extension FIFO: Sendable where Element: Sendable {}
