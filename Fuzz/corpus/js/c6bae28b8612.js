function(doc) {
[1 == '1', 1 === '1', null == undefined, null === undefined, NaN == NaN, '' == 0]
}