import SwiftCouch
