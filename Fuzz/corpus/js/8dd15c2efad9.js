function(doc) {
typeof null + typeof undefined + typeof {} + typeof [] + typeof function(){}
}