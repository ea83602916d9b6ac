// Place.g4 -- the grammar of the Place language, version 0 (docs/language.md).
//
// No word is reserved: keywords are tokens of their own, but the `ident` rule accepts each of them
// wherever a name may stand. The grammar has no recursive rule, so the parser's stack depth does
// not grow with the input. Shared prefixes are factored so that every decision but one (a call
// argument's optional `key =`) is made on a single token, which keeps prediction cheap and lets a
// syntax error name exactly the tokens that were possible. Every part the AST needs has a label,
// so that AstBuilder reads fields instead of searching a context's children.
grammar Place;

program : decls+=topDecl* EOF ;

topDecl
  : importDecl_=importDecl
  | modelDecl_=modelDecl
  | clusterDecl_=clusterDecl
  | strategyDecl_=strategyDecl
  | runDecl_=runDecl
  ;

importDecl  : IMPORT path=STRING ';' ;
modelDecl   : MODEL name=ident (':' kind=ident)? '{' fields+=field* rbrace='}' ;
clusterDecl : CLUSTER name=ident '{' fields+=field* rbrace='}' ;
runDecl     : RUN name=ident '{' fields+=field* rbrace='}' ;

field : key=ident '=' val=value ';' ;

// A value: a number, optionally followed by a unit word (a quantity); a string; or a name,
// optionally followed by arguments (a call such as `mixed(bf16)` or `sgd(momentum = true)`). Call
// arguments are plain values, never calls.
value
  : num=NUMBER unitWord=unit?
  | str=STRING
  | name=ident (lparen='(' args=argList? ')')?
  ;

plainValue
  : num=NUMBER unitWord=unit?
  | str=STRING
  | name=ident
  ;

unit : first=ident ('/' second=ident)? ;

argList : args+=arg (',' args+=arg)* ;
arg     : (key=ident '=')? val=plainValue ;

// The name and parameters are shared by both forms; the body or the composition is chosen on the
// token after them (`{` or `=`).
strategyDecl  : STRATEGY name=ident params=paramList? (body=strategyBody | alias=strategyAlias) ;
strategyBody  : '{' items+=strategyItem* '}' ;
strategyAlias : '=' terms+=strategyTerm ('*' terms+=strategyTerm)* ';' ;

paramList : '(' (params+=param (',' params+=param)*)? ')' ;
param     : name=ident ('=' defaultValue=plainValue)? ;

// `mesh` and `pipeline` start their own items; a placement starts with the name of a state, which
// may be any other word, so each item is chosen on its first token. A placement is a list of
// modes with an optional memory tier, or a tier alone.
strategyItem
  : mesh=MESH '[' (axes+=axis (',' axes+=axis)*)? ']' ';'
  | pipeline=PIPELINE '=' schedule=ident (lparen='(' args=argList? ')')? ';'
  | state=stateName '=' (modes+=modeTerm (',' modes+=modeTerm)* ('@' tier=ident)? | '@' tier=ident) ';'
  ;

stateName : ID | IMPORT | MODEL | CLUSTER | STRATEGY | RUN ;

axis : name=ident (':' kind=ident)? '=' size=plainValue ;

modeTerm     : name=ident (lparen='(' args=argList? ')')? ;
strategyTerm : name=ident (lparen='(' args=argList? ')')? ;

ident
  : ID | IMPORT | MODEL | CLUSTER | STRATEGY | RUN | MESH | PIPELINE
  ;

IMPORT   : 'import' ;
MODEL    : 'model' ;
CLUSTER  : 'cluster' ;
STRATEGY : 'strategy' ;
RUN      : 'run' ;
MESH     : 'mesh' ;
PIPELINE : 'pipeline' ;

LPAREN : '(' ; RPAREN : ')' ; LBRACE : '{' ; RBRACE : '}' ; LBRACK : '[' ; RBRACK : ']' ;
SEMI : ';' ; COMMA : ',' ; ASSIGN : '=' ; COLON : ':' ; STAR : '*' ; AT : '@' ; SLASH : '/' ;

// `1f1b` is the one name that starts with a digit. It is listed before NUMBER so that the
// longer match wins over the number `1` followed by the name `f1b`.
ID : '1f1b' | [A-Za-z_] [A-Za-z0-9_]* ;

// Digits, an optional fraction and exponent, and an optional K/M/B/T multiplier written directly
// after the digits. A unit word must be separated from its number by a space; the front end
// reports `80GiB` (a number directly followed by a name).
NUMBER : DIGITS ('.' DIGITS)? ([eE] [+-]? DIGITS)? [KMBT]? ;
fragment DIGITS : [0-9]+ ;

STRING : '"' ~["\r\n]* '"' ;
UNTERMINATED_STRING : '"' ~["\r\n]* ;

LINE_COMMENT  : '//' ~[\r\n]* -> skip ;
BLOCK_COMMENT : '/*' .*? '*/' -> skip ;
// A block comment that runs to the end of the input; the front end reports it at its start.
UNTERMINATED_BLOCK_COMMENT : '/*' ( ~'*' | '*'+ ~[*/] )* '*'* ;

WS : [ \t\r\n\f]+ -> skip ;

// Any other character; the front end reports it.
BAD_CHAR : . ;
