function(doc) {
function f(...rest) { return rest.length; } f(1, 2, 3)
}